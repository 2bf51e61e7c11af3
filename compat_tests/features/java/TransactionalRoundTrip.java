// The Java client 4.0 against a broker: a transactional producer commits, aborts and commits;
// read_committed and read_uncommitted consumers read the topic back; then a consume-transform-
// produce loop sends a consumer group's offsets to a transaction. Prints one line per fact:
//   committed=<values>  uncommitted=<count>  transformed=<count> group-offset=<offset>
// Usage: java -cp "$KAFKA_HOME/libs/*" TransactionalRoundTrip.java BOOTSTRAP TOPIC TRANSACTIONAL_ID
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class TransactionalRoundTrip {
    static KafkaProducer<String, String> producer(String bootstrap, String tid) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", tid);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        return new KafkaProducer<>(p);
    }

    static KafkaConsumer<String, String> consumer(String bootstrap, String isolation, String group) {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("isolation.level", isolation);
        c.put("group.id", group);
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", "earliest");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        return new KafkaConsumer<>(c);
    }

    static List<String> readAll(String bootstrap, String topic, String isolation, int expected) {
        List<String> out = new ArrayList<>();
        try (KafkaConsumer<String, String> c = consumer(bootstrap, isolation, "reader-" + isolation)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            long deadline = System.currentTimeMillis() + 30000;
            while (out.size() < expected && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) out.add(r.value());
            }
            // a little longer: nothing more may arrive
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) out.add(r.value());
        }
        return out;
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], tid = args[2];
        try (KafkaProducer<String, String> p = producer(bootstrap, tid)) {
            p.initTransactions();
            p.beginTransaction();
            for (int i = 0; i < 10; i++) p.send(new ProducerRecord<>(topic, 0, "k", "c" + i));
            p.commitTransaction();
            p.beginTransaction();
            for (int i = 0; i < 5; i++) p.send(new ProducerRecord<>(topic, 0, "k", "a" + i));
            p.flush();
            p.abortTransaction();
            p.beginTransaction();
            for (int i = 10; i < 13; i++) p.send(new ProducerRecord<>(topic, 0, "k", "c" + i));
            p.commitTransaction();
        }
        System.out.println("committed=" + String.join(",", readAll(bootstrap, topic, "read_committed", 13)));
        System.out.println("uncommitted=" + readAll(bootstrap, topic, "read_uncommitted", 18).size());

        String out = topic + "-out", group = tid + "-group";
        int transformed = 0;
        try (KafkaProducer<String, String> p = producer(bootstrap, tid + "-ctp");
             KafkaConsumer<String, String> c = consumer(bootstrap, "read_committed", group)) {
            p.initTransactions();
            c.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 30000;
            while (transformed < 13 && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(200));
                if (records.isEmpty()) continue;
                p.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : records) {
                    p.send(new ProducerRecord<>(out, 0, r.key(), r.value().toUpperCase()));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    transformed++;
                }
                p.sendOffsetsToTransaction(offsets, c.groupMetadata());
                p.commitTransaction();
            }
            OffsetAndMetadata committed = c.committed(Set.of(new TopicPartition(topic, 0))).get(new TopicPartition(topic, 0));
            System.out.println("transformed=" + transformed + " group-offset=" + (committed == null ? -1 : committed.offset()));
        }
        System.out.println("output=" + String.join(",", readAll(bootstrap, out, "read_committed", 13)));
    }
}
