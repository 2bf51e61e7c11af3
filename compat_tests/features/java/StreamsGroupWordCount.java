// One Kafka Streams 4.3 instance of a word count under the streams rebalance protocol (KIP-1071,
// group.protocol=streams), in-memory stores only. It prints "state=S" on every state change and
// "tasks=ACTIVE|STANDBY" (sorted task ids) whenever its tasks change; a line "stop" on stdin, or
// its end, closes it gracefully (committing), after which it prints "closed".
// Usage: java -cp CP StreamsGroupWordCount.java BOOTSTRAP APPLICATION_ID INPUT OUTPUT STATE_DIR [GUARANTEE]
// (GUARANTEE: processing.guarantee, at_least_once by default, or exactly_once_v2)
import java.io.*;
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.*;
import org.apache.kafka.streams.kstream.*;
import org.apache.kafka.streams.state.Stores;

public class StreamsGroupWordCount {
    static String tasks(KafkaStreams streams) {
        SortedSet<String> active = new TreeSet<>(), standby = new TreeSet<>();
        for (ThreadMetadata t : streams.metadataForLocalThreads()) {
            for (TaskMetadata m : t.activeTasks()) active.add(m.taskId().toString());
            for (TaskMetadata m : t.standbyTasks()) standby.add(m.taskId().toString());
        }
        return String.join(",", active) + "|" + String.join(",", standby);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], app = args[1], input = args[2], output = args[3], stateDir = args[4];
        String guarantee = args.length > 5 ? args[5] : StreamsConfig.AT_LEAST_ONCE;
        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            .flatMapValues(v -> Arrays.asList(v.split(" ")))
            .groupBy((k, w) -> w, Grouped.with(Serdes.String(), Serdes.String()))
            .count(Materialized.<String, Long>as(Stores.inMemoryKeyValueStore("counts"))
                .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
            .toStream()
            .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        Properties sp = new Properties();
        sp.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
        sp.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        sp.put("group.protocol", "streams");
        sp.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        sp.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        sp.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        sp.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        sp.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        KafkaStreams streams = new KafkaStreams(builder.build(), sp);
        streams.setStateListener((now, before) -> System.out.println("state=" + now));
        streams.start();
        Thread watcher = new Thread(() -> {
            String last = null;
            while (!Thread.currentThread().isInterrupted()) {
                try {
                    String now = tasks(streams);
                    if (!now.equals(last)) { System.out.println("tasks=" + now); last = now; }
                    Thread.sleep(100);
                } catch (InterruptedException e) { return; } catch (RuntimeException e) { /* not running yet */ }
            }
        });
        watcher.setDaemon(true);
        watcher.start();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null && !line.equals("stop")) { }
        watcher.interrupt();
        streams.close(Duration.ofSeconds(30));
        System.out.println("closed");
    }
}
