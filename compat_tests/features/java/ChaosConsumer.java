import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * For strom.testing's chaos rules (compat_tests/features/test_testbroker_chaos.py): produce N
 * records with an idempotent acks=all producer, then consume them in group GROUP until all N were
 * seen, committing after each poll, print what was delivered ("produced=N delivered=D
 * distinct=U") and stay in the group until a line arrives on stdin. The Python side adds fault
 * rules and waits on the broker meanwhile.
 */
public class ChaosConsumer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        int n = Integer.parseInt(args[3]);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("enable.idempotence", "true");
        p.put("acks", "all");
        p.put("retry.backoff.ms", "20");
        p.put("key.serializer", "org.apache.kafka.common.serialization.StringSerializer");
        p.put("value.serializer", "org.apache.kafka.common.serialization.StringSerializer");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < n; i++) {
                producer.send(new ProducerRecord<>(topic, "k" + i, "v" + i)).get();
            }
        }
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", group);
        c.put("auto.offset.reset", "earliest");
        c.put("enable.auto.commit", "false");
        c.put("reconnect.backoff.ms", "20");
        c.put("key.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        c.put("value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        int delivered = 0;
        Set<String> distinct = new HashSet<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 60_000;
            while (distinct.size() < n && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(100))) {
                    delivered++;
                    distinct.add(r.value());
                }
                consumer.commitSync();
            }
            System.out.println("produced=" + n + " delivered=" + delivered + " distinct=" + distinct.size());
            System.out.flush();
            System.in.read(); // stays in the group until the test has looked (a line on stdin)
        }
    }
}
