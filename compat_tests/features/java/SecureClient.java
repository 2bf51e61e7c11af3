import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import java.time.Duration;
import java.util.List;
import java.util.Properties;

/** Produces `count` records to `topic` and reads them back (assigned partition 0), with the given
 *  client configs (security.protocol, sasl.*, ssl.* ...). Prints "ok <n>" or the failure.
 *  Args: bootstrap topic count [key=value ...] */
public class SecureClient {
  public static void main(String[] a) throws Exception {
    Properties p = new Properties();
    p.put("bootstrap.servers", a[0]);
    for (int i = 3; i < a.length; i++) {
      String[] kv = a[i].split("=", 2);
      p.put(kv[0], kv[1]);
    }
    int count = Integer.parseInt(a[2]);
    Properties pp = new Properties();
    pp.putAll(p);
    pp.put("key.serializer", "org.apache.kafka.common.serialization.StringSerializer");
    pp.put("value.serializer", "org.apache.kafka.common.serialization.StringSerializer");
    pp.put("max.block.ms", "20000");
    pp.put("delivery.timeout.ms", "20000");
    pp.put("request.timeout.ms", "10000");
    try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
      for (int i = 0; i < count; i++) {
        producer.send(new ProducerRecord<>(a[1], 0, null, "v" + i)).get();
      }
    } catch (Exception e) {
      System.out.println("produce failed: " + e);
      return;
    }
    Properties cp = new Properties();
    cp.putAll(p);
    cp.put("key.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
    cp.put("value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
    cp.put("auto.offset.reset", "earliest");
    int got = 0;
    long end = System.currentTimeMillis() + 20000;
    try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cp)) {
      c.assign(List.of(new TopicPartition(a[1], 0)));
      c.seekToBeginning(List.of(new TopicPartition(a[1], 0)));
      while (got < count && System.currentTimeMillis() < end) {
        for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) got++;
      }
    }
    System.out.println("ok " + got);
  }
}
