import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Properties;
import java.util.Set;

/** Consumes a topic until it has `expected` records or `timeout_ms` passed; prints what it saw.
 *  Args: bootstrap group topic expected timeout_ms [key=value ...] (extra consumer configs). */
public class CountingConsumer {
  public static void main(String[] a) {
    Properties p = new Properties();
    p.put("bootstrap.servers", a[0]);
    p.put("group.id", a[1]);
    p.put("key.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
    p.put("value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
    p.put("auto.offset.reset", "earliest");
    for (int i = 5; i < a.length; i++) {
      String[] kv = a[i].split("=", 2);
      p.put(kv[0], kv[1]);
    }
    long expected = Long.parseLong(a[3]);
    long end = System.currentTimeMillis() + Long.parseLong(a[4]);
    long total = 0;
    Set<String> values = new HashSet<>();
    try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
      c.subscribe(List.of(a[2]));
      System.out.println("subscribed");
      System.out.flush();
      while (total < expected && System.currentTimeMillis() < end) {
        for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
          total++;
          values.add(r.value());
        }
      }
    }
    System.out.println("consumed " + total + " unique " + values.size());
  }
}
