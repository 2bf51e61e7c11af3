import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

/** A group member that processes a record only once its offset is committed (commitSync after
 *  each poll); a failed commit sends it back to the first uncommitted offset of each partition it
 *  still owns. Prints "processed VALUE" per record, "assigned N" after each rebalance; stops and
 *  leaves the group (close) when its standard input ends.
 *  Args: bootstrap group topic client_id [key=value ...] (extra consumer configs). */
public class MigratingConsumer {
  public static void main(String[] a) throws Exception {
    Properties p = new Properties();
    p.put("bootstrap.servers", a[0]);
    p.put("group.id", a[1]);
    p.put("client.id", a[3]);
    p.put("key.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
    p.put("value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
    p.put("auto.offset.reset", "earliest");
    p.put("enable.auto.commit", "false");
    for (int i = 4; i < a.length; i++) {
      String[] kv = a[i].split("=", 2);
      p.put(kv[0], kv[1]);
    }
    Thread stdin = new Thread(() -> {
      try (BufferedReader r = new BufferedReader(new InputStreamReader(System.in))) {
        while (r.readLine() != null) { }
      } catch (Exception e) { }
    });
    stdin.setDaemon(true);
    stdin.start();
    try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
      c.subscribe(List.of(a[2]), new ConsumerRebalanceListener() {
        public void onPartitionsRevoked(Collection<TopicPartition> parts) { }
        public void onPartitionsAssigned(Collection<TopicPartition> parts) {
          System.out.println("assigned " + c.assignment().size());
          System.out.flush();
        }
      });
      while (stdin.isAlive()) {
        ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(100));
        if (records.isEmpty()) continue;
        Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
        Map<TopicPartition, Long> first = new HashMap<>();
        for (ConsumerRecord<String, String> r : records) {
          TopicPartition tp = new TopicPartition(r.topic(), r.partition());
          first.putIfAbsent(tp, r.offset());
          next.put(tp, new OffsetAndMetadata(r.offset() + 1));
        }
        try {
          c.commitSync(next);
        } catch (KafkaException e) {
          System.out.println("commit-failed " + e.getClass().getSimpleName());
          for (Map.Entry<TopicPartition, Long> f : first.entrySet()) {
            if (c.assignment().contains(f.getKey())) c.seek(f.getKey(), f.getValue());
          }
          continue;
        }
        StringBuilder out = new StringBuilder();
        for (ConsumerRecord<String, String> r : records) out.append("processed ").append(r.value()).append('\n');
        System.out.print(out);
        System.out.flush();
      }
    }
    System.out.println("closed");
    System.out.flush();
  }
}
