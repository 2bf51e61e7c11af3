#!/usr/bin/env node
// kafkajs over a secured listener for Strom's compat_tests (test_security.py):
//   node security.js BOOTSTRAP TOPIC CA_PEM MECHANISM USER PASSWORD
// MECHANISM: none (SSL only), plain, scram-sha-256 or scram-sha-512 (SASL_SSL). Produces three
// records, reads them back with a consumer group and prints {"values": [...]}; an error exits 1.
'use strict'

const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')

async function main() {
  const [bootstrap, topic, caPem, mechanism, username, password] = process.argv.slice(2)
  const config = { clientId: 'strom-compat-kafkajs-security', brokers: [bootstrap], logLevel: logLevel.WARN,
    ssl: { ca: [fs.readFileSync(caPem, 'utf-8')] }, retry: { retries: 3 } }
  if (mechanism !== 'none') config.sasl = { mechanism, username, password }
  const kafka = new Kafka(config)
  const admin = kafka.admin()
  await admin.connect()
  await admin.createTopics({ topics: [{ topic, numPartitions: 1 }] })
  await admin.disconnect()
  const producer = kafka.producer()
  await producer.connect()
  await producer.send({ topic, messages: ['a', 'b', 'c'].map((value) => ({ value })) })
  await producer.disconnect()
  const consumer = kafka.consumer({ groupId: `${topic}-group` })
  const got = []
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  await consumer.run({ eachMessage: async ({ message }) => { got.push(message.value.toString()) } })
  const deadline = Date.now() + 30000
  while (got.length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100))
  await consumer.disconnect()
  console.log(JSON.stringify({ values: got }))
}

main().catch((err) => { console.error(err); process.exit(1) })
