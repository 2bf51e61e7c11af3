#!/usr/bin/env node
// kafkajs driver for Strom's compat_tests, run by compat_tests/support/clients/kafkajs.py.
//
//   node client.js produce BOOTSTRAP TOPIC CODEC < records.jsonl
//       each stdin line: {"p": partition, "k": b64, "v": b64, "h": [[name, b64], ...], "ts": ms}
//       prints {"produced": N} when every record is acknowledged (acks=-1)
//   node client.js consume BOOTSTRAP TOPIC COUNTS_JSON TIMEOUT_MS OUT_FILE
//       COUNTS_JSON: {"0": n0, "1": n1, ...}; writes OUT_FILE with one line per record
//       {"p", "o", "k", "v", "h", "ts"} (bytes as base64), then {"done": true}
//       (a file, not stdout: process.exit() can cut a large piped stdout short)
//
// kafkajs has no group-less consumer, and consumer groups are not in the broker yet, so
// `consume` fetches through kafkajs's own cluster and broker objects (the code its
// consumer runs underneath): same Fetch encoding, record batch decoding and codecs.
// Diagnostics go to stderr; any error exits with status 1.
'use strict'

const fs = require('fs')
const readline = require('readline')
const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = require('kafkajs')
const SnappyCodec = require('kafkajs-snappy')
const LZ4Codec = require('kafkajs-lz4')
const zstd = require('zstd-napi')

// kafkajs ships gzip only; the others are registered as its README describes. No
// maintained kafkajs zstd codec builds on current node, so this one wraps zstd-napi.
CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec
CompressionCodecs[CompressionTypes.LZ4] = new LZ4Codec().codec
CompressionCodecs[CompressionTypes.ZSTD] = () => ({
  async compress(encoder) {
    return zstd.compress(encoder.buffer)
  },
  async decompress(buffer) {
    return zstd.decompress(buffer)
  },
})

const CODECS = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4,
  zstd: CompressionTypes.ZSTD,
}
// One send() at a time: kafkajs encodes (and compresses) each send asynchronously, so
// concurrent sends can reach the wire in either order and reorder a partition.
const MESSAGES_PER_SEND = 3000

function client(bootstrap) {
  return new Kafka({
    clientId: 'strom-compat-kafkajs',
    brokers: [bootstrap],
    logLevel: logLevel.WARN,
    logCreator: () => ({ namespace, log }) => {
      process.stderr.write(`[${namespace}] ${JSON.stringify(log)}\n`)
    },
    retry: { retries: 5 },
  })
}

async function readRecords() {
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity })
  const records = []
  for await (const line of lines) {
    if (!line) continue
    const r = JSON.parse(line)
    records.push({
      partition: r.p,
      key: Buffer.from(r.k, 'base64'),
      value: Buffer.from(r.v, 'base64'),
      headers: Object.fromEntries(r.h.map(([name, b64]) => [name, Buffer.from(b64, 'base64')])),
      timestamp: String(r.ts),
    })
  }
  return records
}

async function produce(bootstrap, topic, codec) {
  if (!(codec in CODECS)) throw new Error(`unknown codec ${codec}`)
  const records = await readRecords()
  const producer = client(bootstrap).producer({ allowAutoTopicCreation: false })
  await producer.connect()
  try {
    for (let i = 0; i < records.length; i += MESSAGES_PER_SEND) {
      const messages = records.slice(i, i + MESSAGES_PER_SEND)
      await producer.send({ topic, acks: -1, compression: CODECS[codec], messages })
    }
  } finally {
    await producer.disconnect()
  }
  process.stdout.write(JSON.stringify({ produced: records.length }) + '\n')
}

function privateCluster(kafka) {
  const symbol = Object.getOwnPropertySymbols(kafka).find(
    s => s.description === 'private:Kafka:createCluster'
  )
  if (!symbol) throw new Error('this kafkajs version has no private createCluster')
  return kafka[symbol]({ allowAutoTopicCreation: false })
}

function emit(out, partition, m) {
  const headers = Object.entries(m.headers || {}).map(([name, value]) => [
    name,
    Buffer.from(value).toString('base64'),
  ])
  const line = {
    p: partition,
    o: Number(m.offset),
    k: m.key == null ? null : m.key.toString('base64'),
    v: m.value == null ? null : m.value.toString('base64'),
    h: headers,
    ts: Number(m.timestamp),
  }
  fs.writeSync(out, JSON.stringify(line) + '\n')
}

async function fetchOnce(cluster, topic, next, out) {
  const pending = Object.keys(next).map(Number)
  const byLeader = cluster.findLeaderForPartitions(topic, pending)
  let received = 0
  for (const [nodeId, partitions] of Object.entries(byLeader)) {
    const broker = await cluster.findBroker({ nodeId })
    const response = await broker.fetch({
      replicaId: -1,
      isolationLevel: 1,
      maxWaitTime: 500,
      minBytes: 1,
      maxBytes: 16 * 1024 * 1024,
      topics: [
        {
          topic,
          partitions: partitions.map(partition => ({
            partition,
            fetchOffset: String(next[partition]),
            maxBytes: 4 * 1024 * 1024,
          })),
        },
      ],
    })
    for (const topicResponse of response.responses) {
      for (const p of topicResponse.partitions) {
        if (p.errorCode !== 0) throw new Error(`fetch partition ${p.partition}: error ${p.errorCode}`)
        for (const m of p.messages) {
          // A batch is returned whole; records before the fetch offset are skipped, as
          // kafkajs's consumer does.
          if (Number(m.offset) < next[p.partition]) continue
          emit(out, p.partition, m)
          next[p.partition] = Number(m.offset) + 1
          received += 1
        }
      }
    }
  }
  return received
}

async function consume(bootstrap, topic, countsJson, timeoutMs, outFile) {
  const counts = JSON.parse(countsJson)
  const out = fs.openSync(outFile, 'w')
  const cluster = privateCluster(client(bootstrap))
  await cluster.connect()
  try {
    await cluster.addTargetTopic(topic)
    const next = Object.fromEntries(Object.keys(counts).map(p => [p, 0]))
    const deadline = Date.now() + Number(timeoutMs)
    const unfinished = () => Object.keys(counts).some(p => next[p] < counts[p])
    while (unfinished() && Date.now() < deadline) {
      const wanted = Object.fromEntries(Object.entries(next).filter(([p]) => next[p] < counts[p]))
      const received = await fetchOnce(cluster, topic, wanted, out)
      Object.assign(next, wanted)
      if (received === 0) await new Promise(resolve => setTimeout(resolve, 100))
    }
  } finally {
    await cluster.disconnect()
  }
  fs.writeSync(out, JSON.stringify({ done: true }) + '\n')
  fs.closeSync(out)
}

const COMMANDS = { produce, consume }

async function main(argv) {
  const [command, ...args] = argv
  const run = COMMANDS[command]
  if (!run) throw new Error(`usage: client.js (${Object.keys(COMMANDS).join('|')}) ...`)
  await run(...args)
}

main(process.argv.slice(2)).then(
  () => process.exit(0),
  err => {
    process.stderr.write(`kafkajs client failed: ${err && err.stack ? err.stack : err}\n`)
    process.exit(1)
  }
)
