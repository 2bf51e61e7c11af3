#!/usr/bin/env node
// kafkajs transactions for Strom's compat_tests (test_transactions_clients.py):
//   node transactions.js BOOTSTRAP TOPIC TRANSACTIONAL_ID
// commits c0 c1, aborts a0 a1, commits c2 c3 with the offset 5 of group `<tid>-group` sent to
// the transaction; then reads the topic with read_committed and read_uncommitted consumers and
// prints one JSON line {"read_committed": [...], "read_uncommitted": [...], "committed": "5"}.
'use strict'

const { Kafka, logLevel } = require('kafkajs')

async function readAll(kafka, topic, readUncommitted, expected) {
  const consumer = kafka.consumer({ groupId: `reader-${readUncommitted}-${Date.now()}`, readUncommitted })
  const got = []
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  await consumer.run({ eachMessage: async ({ message }) => { got.push(message.value.toString()) } })
  const deadline = Date.now() + 30000
  while (got.length < expected && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100))
  await new Promise((r) => setTimeout(r, 500))
  await consumer.disconnect()
  return got
}

async function main() {
  const [bootstrap, topic, transactionalId] = process.argv.slice(2)
  const kafka = new Kafka({ clientId: 'strom-compat-kafkajs-txn', brokers: [bootstrap], logLevel: logLevel.WARN })
  const producer = kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  const send = async (values, commit, offsets) => {
    const txn = await producer.transaction()
    await txn.send({ topic, messages: values.map((value) => ({ value, partition: 0 })) })
    if (offsets) await txn.sendOffsets(offsets)
    if (commit) await txn.commit()
    else await txn.abort()
  }
  await send(['c0', 'c1'], true)
  await send(['a0', 'a1'], false)
  await send(['c2', 'c3'], true, {
    consumerGroupId: `${transactionalId}-group`,
    topics: [{ topic, partitions: [{ partition: 0, offset: '5' }] }],
  })
  await producer.disconnect()
  const out = {
    read_committed: await readAll(kafka, topic, false, 4),
    read_uncommitted: await readAll(kafka, topic, true, 6),
  }
  const admin = kafka.admin()
  await admin.connect()
  const offsets = await admin.fetchOffsets({ groupId: `${transactionalId}-group`, topics: [topic] })
  out.committed = offsets[0].partitions.find((p) => p.partition === 0).offset
  await admin.disconnect()
  process.stdout.write(JSON.stringify(out) + '\n')
}

main().then(() => process.exit(0), (err) => {
  process.stderr.write(`${err.stack || err}\n`)
  process.exit(1)
})
