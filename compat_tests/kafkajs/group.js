// A kafkajs consumer group member: node group.js <bootstrap> <group> <topic> <count>.
// Prints "<partition> <offset>" per record, commits, and exits after <count> records.
const { Kafka, logLevel } = require('kafkajs');

async function main() {
  const [bootstrap, groupId, topic, countText] = process.argv.slice(2);
  const count = Number(countText);
  const kafka = new Kafka({ clientId: 'strom-group-test', brokers: [bootstrap], logLevel: logLevel.NOTHING });
  const consumer = kafka.consumer({ groupId, sessionTimeout: 6000, heartbeatInterval: 500 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  let seen = 0;
  let finish;
  const done = new Promise((resolve) => { finish = resolve; });
  await consumer.run({
    autoCommit: true,
    eachMessage: async ({ partition, message }) => {
      process.stdout.write(`${partition} ${message.offset}\n`);
      seen += 1;
      if (seen >= count) finish();
    },
  });
  await done;
  await consumer.disconnect();
}

main().catch((err) => { console.error(err); process.exit(1); });
