// The Java client 4.3.1 against Strom: an idempotent producer, then a consumer of each group
// protocol that reads everything and commits it (commitSync), then the committed offsets read back
// (committed() and Admin listConsumerGroupOffsets). Prints "OK <records>" or fails with a message.
// Run: java -cp <kafka-clients-4.3.1.jar and Kafka 4.0's third-party jars> Kafka43Client.java BOOTSTRAP TOPIC
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class Kafka43Client {
    static void require(boolean ok, String what) {
        if (!ok) throw new IllegalStateException(what);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int n = 20;
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("enable.idempotence", "true");
        p.put("acks", "all");
        try (Producer<String, String> producer = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < n; i++) producer.send(new ProducerRecord<>(topic, i % 2, "k" + i, "v" + i)).get();
        }
        for (String protocol : List.of("classic", "consumer")) {
            String group = "g43-" + protocol + "-" + topic;
            Properties c = new Properties();
            c.put("bootstrap.servers", bootstrap);
            c.put("group.id", group);
            c.put("group.protocol", protocol);
            c.put("auto.offset.reset", "earliest");
            c.put("enable.auto.commit", "false");
            int seen = 0;
            try (Consumer<String, String> consumer = new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer())) {
                consumer.subscribe(List.of(topic));
                long deadline = System.currentTimeMillis() + 60_000;
                while (seen < n && System.currentTimeMillis() < deadline) {
                    ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                    seen += records.count();
                    if (!records.isEmpty()) consumer.commitSync();
                }
                require(seen == n, protocol + ": consumed " + seen + " of " + n);
                Set<TopicPartition> parts = Set.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1));
                Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(parts);
                long total = committed.values().stream().mapToLong(OffsetAndMetadata::offset).sum();
                require(total == n, protocol + ": committed offsets sum to " + total);
            }
            try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
                Map<TopicPartition, OffsetAndMetadata> listed =
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
                long total = listed.values().stream().mapToLong(OffsetAndMetadata::offset).sum();
                require(total == n, protocol + ": admin lists committed offsets summing to " + total);
            }
        }
        System.out.println("OK " + n);
    }
}
