// Kafka Streams 4.0 word count with processing.guarantee=exactly_once_v2 and in-memory stores
// (no RocksDB here), against a broker. Writes LINES lines to INPUT, runs the topology until the
// output's read_committed view holds the final count of every word, prints "word=count" lines
// of that final view and "done".
// Usage: java -cp "$KAFKA_HOME/libs/*" EosWordCount.java BOOTSTRAP INPUT OUTPUT LINES STATE_DIR
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.*;
import org.apache.kafka.streams.kstream.*;
import org.apache.kafka.streams.state.*;

public class EosWordCount {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], input = args[1], output = args[2], stateDir = args[4];
        int lines = Integer.parseInt(args[3]);
        String[] words = {"alpha", "beta", "gamma", "delta", "epsilon"};
        Map<String, Long> expected = new TreeMap<>();
        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp)) {
            for (int i = 0; i < lines; i++) {
                String line = words[i % 5] + " " + words[(i * 3) % 5] + " " + words[(i * 7 + 1) % 5];
                for (String w : line.split(" ")) expected.merge(w, 1L, Long::sum);
                p.send(new ProducerRecord<>(input, null, line));
            }
        }

        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            .flatMapValues(v -> Arrays.asList(v.split(" ")))
            .groupBy((k, w) -> w, Grouped.with(Serdes.String(), Serdes.String()))
            .count(Materialized.<String, Long>as(Stores.inMemoryKeyValueStore("counts"))
                .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
            .toStream()
            .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        Properties sp = new Properties();
        sp.put(StreamsConfig.APPLICATION_ID_CONFIG, "eos-wordcount");
        sp.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        sp.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        sp.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        sp.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        sp.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        sp.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        KafkaStreams streams = new KafkaStreams(builder.build(), sp);
        streams.start();

        Properties cp = new Properties();
        cp.put("bootstrap.servers", bootstrap);
        cp.put("group.id", "eos-verify");
        cp.put("isolation.level", "read_committed");
        cp.put("auto.offset.reset", "earliest");
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", LongDeserializer.class.getName());
        Map<String, Long> seen = new TreeMap<>();
        try (KafkaConsumer<String, Long> c = new KafkaConsumer<>(cp)) {
            c.subscribe(List.of(output));
            long deadline = System.currentTimeMillis() + 120000;
            while (!seen.equals(expected) && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, Long> r : c.poll(Duration.ofMillis(200))) seen.put(r.key(), r.value());
            }
        } finally {
            streams.close(Duration.ofSeconds(30));
        }
        for (Map.Entry<String, Long> e : seen.entrySet()) System.out.println(e.getKey() + "=" + e.getValue());
        System.out.println("expected=" + expected);
        System.out.println(seen.equals(expected) ? "done" : "incomplete");
    }
}
