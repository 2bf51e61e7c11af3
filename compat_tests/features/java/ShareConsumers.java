// Kafka 4.3's KafkaShareConsumer against a broker (compat_tests/features/test_share_groups_java.py).
// Usage: ShareConsumers BOOTSTRAP GROUP TOPIC MODE COUNT
//   accept:  poll until COUNT records (or 3 s without one, once some came), ACCEPT each, commitSync;
//            print "partition offset deliveryCount" per record
//   release: poll until COUNT records, RELEASE them, commitSync; poll them again, print, ACCEPT, commitSync
//   hold:    poll until COUNT records, print them, then halt the JVM without acknowledging
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class ShareConsumers {
    static List<ConsumerRecord<byte[], byte[]>> pollUntil(KafkaShareConsumer<byte[], byte[]> c, int count, AcknowledgeType ack) {
        List<ConsumerRecord<byte[], byte[]>> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 60_000;
        long last = System.currentTimeMillis();
        while (got.size() < count && System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
                got.add(r);
                last = System.currentTimeMillis();
                if (ack != null) c.acknowledge(r, ack);
            }
            if (!got.isEmpty() && System.currentTimeMillis() - last > 3_000) break;
        }
        return got;
    }

    static void print(List<ConsumerRecord<byte[], byte[]>> records) {
        for (ConsumerRecord<byte[], byte[]> r : records) {
            System.out.println(r.partition() + " " + r.offset() + " " + r.deliveryCount().orElse((short) -1));
        }
        System.out.flush();
    }

    public static void main(String[] args) {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[1]);
        props.put("share.acknowledgement.mode", "explicit");
        String mode = args[3];
        int count = Integer.parseInt(args[4]);
        KafkaShareConsumer<byte[], byte[]> c =
            new KafkaShareConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer());
        c.subscribe(List.of(args[2]));
        if (mode.equals("hold")) {
            print(pollUntil(c, count, null));
            System.out.println("HOLDING");
            System.out.flush();
            Runtime.getRuntime().halt(0);
        }
        if (mode.equals("release")) {
            List<ConsumerRecord<byte[], byte[]>> first = pollUntil(c, count, AcknowledgeType.RELEASE);
            c.commitSync();
            print(first);
        }
        List<ConsumerRecord<byte[], byte[]>> got = pollUntil(c, count, AcknowledgeType.ACCEPT);
        c.commitSync();
        print(got);
        c.close();
    }
}
