// The Java client 4.0 against Strom: many checks in one JVM (a JVM start costs seconds here).
//
//   java -cp "$KAFKA_HOME/libs/*" StromClientChecks.java 127.0.0.1:PORT
//
// Prints one line per check, "PASS name millis" or "FAIL name reason", then "DONE passed failed";
// exits 0 only when every check passed. compat_tests/java/test_java_client.py runs it.
import java.time.Duration;
import java.util.*;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.ElectionNotNeededException;
import org.apache.kafka.common.errors.SecurityDisabledException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class StromClientChecks {
    static String bootstrap;
    static Admin admin;
    static int passed = 0, failed = 0;
    static final long BASE_TS = 1_700_000_000_000L;
    static final String[] CODECS = {"none", "gzip", "snappy", "lz4", "zstd"};
    static final long TIMEOUT_S = 30;

    interface Check { void run() throws Exception; }

    static void check(String name, Check c) {
        long t0 = System.nanoTime();
        try {
            c.run();
            passed++;
            System.out.println("PASS " + name + " " + (System.nanoTime() - t0) / 1_000_000);
        } catch (Throwable e) {
            failed++;
            Throwable cause = e.getCause() != null && e instanceof java.util.concurrent.ExecutionException ? e.getCause() : e;
            System.out.println("FAIL " + name + " " + cause.toString().replace('\n', ' '));
        }
        System.out.flush();
    }

    static void require(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    static void waitFor(String what, long timeoutMs, BooleanSupplier cond) throws InterruptedException {
        long end = System.currentTimeMillis() + timeoutMs;
        while (!cond.getAsBoolean()) {
            if (System.currentTimeMillis() > end) throw new AssertionError("timed out waiting for " + what);
            Thread.sleep(50);
        }
    }

    static Properties base() {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("request.timeout.ms", "20000");
        p.put("default.api.timeout.ms", "30000");
        return p;
    }

    static KafkaProducer<String, String> producer(String codec, boolean idempotent) {
        Properties p = base();
        p.put("enable.idempotence", String.valueOf(idempotent));
        p.put("acks", "all");
        p.put("compression.type", codec);
        p.put("linger.ms", "5");
        p.put("max.block.ms", "30000");
        p.put("delivery.timeout.ms", "60000");
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static KafkaConsumer<String, String> consumer(String group, String assignor, boolean autoCommit) {
        Properties p = base();
        if (group != null) p.put("group.id", group);
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", String.valueOf(autoCommit));
        p.put("auto.commit.interval.ms", "100");
        p.put("fetch.max.wait.ms", "100");
        p.put("heartbeat.interval.ms", "500");
        p.put("session.timeout.ms", "10000");
        if (assignor != null) p.put("partition.assignment.strategy", assignor);
        return new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
    }

    static List<ConsumerRecord<String, String>> readAll(String topic, int partition, int expected) throws Exception {
        List<ConsumerRecord<String, String>> out = new ArrayList<>();
        try (KafkaConsumer<String, String> c = consumer(null, null, false)) {
            TopicPartition tp = new TopicPartition(topic, partition);
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            long end = System.currentTimeMillis() + TIMEOUT_S * 1000;
            while (out.size() < expected && System.currentTimeMillis() < end) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) out.add(r);
            }
        }
        return out;
    }

    static void createTopics(Map<String, Integer> topics, Map<String, String> configs) throws Exception {
        List<NewTopic> list = new ArrayList<>();
        topics.forEach((name, parts) -> list.add(new NewTopic(name, parts, (short) 1).configs(configs)));
        admin.createTopics(list).all().get(TIMEOUT_S, TimeUnit.SECONDS);
    }

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        admin = Admin.create(base());

        check("admin.create_topics", () -> {
            Map<String, Integer> topics = new LinkedHashMap<>();
            for (String codec : CODECS) topics.put("j-codec-" + codec, 1);
            topics.put("j-groups", 4);
            topics.put("j-coop", 4);
            topics.put("j-time", 1);
            createTopics(topics, Map.of());
            createTopics(Map.of("j-admin", 2), Map.of("retention.ms", "3600000"));
            Set<String> names = admin.listTopics().names().get(TIMEOUT_S, TimeUnit.SECONDS);
            require(names.containsAll(topics.keySet()) && names.contains("j-admin"), "listTopics: " + names);
        });

        for (String codec : CODECS) {
            check("producer.idempotent." + codec, () -> {
                String topic = "j-codec-" + codec;
                List<java.util.concurrent.Future<RecordMetadata>> sent = new ArrayList<>();
                try (KafkaProducer<String, String> p = producer(codec, true)) {
                    for (int i = 0; i < 100; i++) {
                        ProducerRecord<String, String> r = new ProducerRecord<>(topic, 0, "k" + i, codec + "-" + i);
                        r.headers().add("i", Integer.toString(i).getBytes());
                        sent.add(p.send(r));
                    }
                    p.flush();
                }
                for (int i = 0; i < 100; i++) {
                    long off = sent.get(i).get(TIMEOUT_S, TimeUnit.SECONDS).offset();
                    require(off == i, "record " + i + " acknowledged at offset " + off);
                }
                List<ConsumerRecord<String, String>> got = readAll(topic, 0, 100);
                require(got.size() == 100, "read back " + got.size() + " of 100");
                for (int i = 0; i < 100; i++) {
                    ConsumerRecord<String, String> r = got.get(i);
                    Header h = r.headers().lastHeader("i");
                    require(r.offset() == i && r.key().equals("k" + i) && r.value().equals(codec + "-" + i)
                            && h != null && new String(h.value()).equals(Integer.toString(i)), "record " + i + ": " + r);
                }
            });
        }

        check("producer.plain_acks_all_to_four_partitions", () -> {
            try (KafkaProducer<String, String> p = producer("none", false)) {
                for (String topic : List.of("j-groups", "j-coop"))
                    for (int i = 0; i < 40; i++) p.send(new ProducerRecord<>(topic, i % 4, "k" + i, "v" + i));
                p.flush();
            }
            Map<TopicPartition, OffsetSpec> specs = new HashMap<>();
            for (int i = 0; i < 4; i++) specs.put(new TopicPartition("j-groups", i), OffsetSpec.latest());
            admin.listOffsets(specs).all().get(TIMEOUT_S, TimeUnit.SECONDS)
                 .forEach((tp, info) -> require(info.offset() == 10, tp + " ends at " + info.offset()));
        });

        check("consumer.group.range_assignor", () -> groupCheck("j-range", "j-groups",
                "org.apache.kafka.clients.consumer.RangeAssignor", false));
        check("consumer.group.cooperative_sticky_assignor", () -> groupCheck("j-coop-group", "j-coop",
                "org.apache.kafka.clients.consumer.CooperativeStickyAssignor", true));

        check("consumer.manual_commit_and_resume", () -> {
            TopicPartition tp = new TopicPartition("j-codec-none", 0);
            int seen = 0;
            try (KafkaConsumer<String, String> c = consumer("j-manual", null, false)) {
                c.subscribe(List.of("j-codec-none"));
                long end = System.currentTimeMillis() + TIMEOUT_S * 1000;
                while (seen < 30 && System.currentTimeMillis() < end) seen += c.poll(Duration.ofMillis(200)).count();
                require(seen >= 30, "read only " + seen);
                c.commitSync(Map.of(tp, new OffsetAndMetadata(30, "meta")));
                OffsetAndMetadata committed = c.committed(Set.of(tp)).get(tp);
                require(committed.offset() == 30 && "meta".equals(committed.metadata()), "committed " + committed);
            }
            try (KafkaConsumer<String, String> c = consumer("j-manual", null, false)) {
                c.subscribe(List.of("j-codec-none"));
                ConsumerRecords<String, String> recs = ConsumerRecords.empty();
                long end = System.currentTimeMillis() + TIMEOUT_S * 1000;
                while (recs.isEmpty() && System.currentTimeMillis() < end) recs = c.poll(Duration.ofMillis(200));
                require(!recs.isEmpty() && recs.iterator().next().offset() == 30, "resumed at "
                        + (recs.isEmpty() ? "nothing" : recs.iterator().next().offset()));
            }
        });

        check("consumer.auto_commit", () -> {
            int seen = 0;
            try (KafkaConsumer<String, String> c = consumer("j-auto", null, true)) {
                c.subscribe(List.of("j-codec-gzip"));
                long end = System.currentTimeMillis() + TIMEOUT_S * 1000;
                while (seen < 100 && System.currentTimeMillis() < end) seen += c.poll(Duration.ofMillis(200)).count();
                for (int i = 0; i < 5; i++) c.poll(Duration.ofMillis(100));
            }
            require(seen == 100, "read " + seen);
            Map<TopicPartition, OffsetAndMetadata> offsets = admin.listConsumerGroupOffsets("j-auto")
                    .partitionsToOffsetAndMetadata().get(TIMEOUT_S, TimeUnit.SECONDS);
            require(offsets.get(new TopicPartition("j-codec-gzip", 0)).offset() == 100, "auto-committed " + offsets);
        });

        check("consumer.seek_by_timestamp", () -> {
            try (KafkaProducer<String, String> p = producer("none", true)) {
                for (int i = 0; i < 10; i++)
                    p.send(new ProducerRecord<>("j-time", 0, BASE_TS + i * 1000L, "k" + i, "t" + i));
                p.flush();
            }
            TopicPartition tp = new TopicPartition("j-time", 0);
            try (KafkaConsumer<String, String> c = consumer(null, null, false)) {
                c.assign(List.of(tp));
                OffsetAndTimestamp found = c.offsetsForTimes(Map.of(tp, BASE_TS + 4500)).get(tp);
                require(found != null && found.offset() == 5 && found.timestamp() == BASE_TS + 5000, "found " + found);
                require(c.offsetsForTimes(Map.of(tp, BASE_TS + 99_000)).get(tp) == null, "a time after the last record");
                require(c.beginningOffsets(List.of(tp)).get(tp) == 0 && c.endOffsets(List.of(tp)).get(tp) == 10,
                        "beginning/end offsets");
                c.seek(tp, found.offset());
                ConsumerRecords<String, String> recs = ConsumerRecords.empty();
                long end = System.currentTimeMillis() + TIMEOUT_S * 1000;
                while (recs.isEmpty() && System.currentTimeMillis() < end) recs = c.poll(Duration.ofMillis(200));
                ConsumerRecord<String, String> first = recs.iterator().next();
                require(first.offset() == 5 && first.value().equals("t5") && first.timestamp() == BASE_TS + 5000,
                        "first after seek " + first);
            }
        });

        check("admin.describe_cluster", () -> {
            DescribeClusterResult r = admin.describeCluster();
            require(r.clusterId().get() != null && !r.nodes().get().isEmpty() && r.controller().get() != null,
                    "cluster " + r.nodes().get());
        });
        check("admin.describe_topics", () -> {
            TopicDescription d = admin.describeTopics(List.of("j-groups")).allTopicNames().get().get("j-groups");
            require(d.partitions().size() == 4 && d.topicId() != null && d.partitions().get(0).leader() != null,
                    "described " + d);
        });
        ConfigResource adminTopic = new ConfigResource(ConfigResource.Type.TOPIC, "j-admin");
        check("admin.describe_configs", () -> {
            Config cfg = admin.describeConfigs(List.of(adminTopic)).all().get().get(adminTopic);
            ConfigEntry e = cfg.get("retention.ms");
            require(e.value().equals("3600000") && e.source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG,
                    "retention.ms " + e);
            require(cfg.get("cleanup.policy").value().equals("delete"), "cleanup.policy default");
        });
        check("admin.incremental_alter_configs", () -> {
            admin.incrementalAlterConfigs(Map.of(adminTopic, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.APPEND))))
                 .all().get();
            Config cfg = admin.describeConfigs(List.of(adminTopic)).all().get().get(adminTopic);
            require(cfg.get("retention.ms").value().equals("7200000"), "retention.ms " + cfg.get("retention.ms"));
            require(Set.of(cfg.get("cleanup.policy").value().split(",")).equals(Set.of("delete", "compact")),
                    "cleanup.policy " + cfg.get("cleanup.policy"));
        });
        check("admin.create_partitions", () -> {
            admin.createPartitions(Map.of("j-admin", NewPartitions.increaseTo(3))).all().get();
            waitFor("3 partitions", 10_000, () -> {
                try {
                    return admin.describeTopics(List.of("j-admin")).allTopicNames().get().get("j-admin").partitions().size() == 3;
                } catch (Exception e) { return false; }
            });
        });
        check("admin.list_offsets", () -> {
            TopicPartition tp = new TopicPartition("j-time", 0);
            long earliest = admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).all().get().get(tp).offset();
            long latest = admin.listOffsets(Map.of(tp, OffsetSpec.latest())).all().get().get(tp).offset();
            ListOffsetsResult.ListOffsetsResultInfo max = admin.listOffsets(Map.of(tp, OffsetSpec.maxTimestamp())).all().get().get(tp);
            ListOffsetsResult.ListOffsetsResultInfo at = admin.listOffsets(Map.of(tp, OffsetSpec.forTimestamp(BASE_TS + 2500))).all().get().get(tp);
            require(earliest == 0 && latest == 10 && max.offset() == 9 && max.timestamp() == BASE_TS + 9000 && at.offset() == 3,
                    "earliest " + earliest + " latest " + latest + " max " + max + " at " + at);
        });
        check("admin.list_and_describe_consumer_groups", () -> {
            Set<String> ids = new HashSet<>();
            for (ConsumerGroupListing g : admin.listConsumerGroups().all().get()) ids.add(g.groupId());
            require(ids.containsAll(List.of("j-range", "j-coop-group", "j-manual", "j-auto")), "groups " + ids);
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of("j-range")).all().get().get("j-range");
            require(d.groupState() == GroupState.EMPTY && d.members().isEmpty(), "j-range " + d);
        });
        check("admin.alter_and_delete_consumer_group_offsets", () -> {
            TopicPartition tp = new TopicPartition("j-codec-none", 0);
            admin.alterConsumerGroupOffsets("j-manual", Map.of(tp, new OffsetAndMetadata(5))).all().get();
            long now = admin.listConsumerGroupOffsets("j-manual").partitionsToOffsetAndMetadata().get().get(tp).offset();
            require(now == 5, "altered to " + now);
            admin.deleteConsumerGroupOffsets("j-manual", Set.of(tp)).all().get();
            require(admin.listConsumerGroupOffsets("j-manual").partitionsToOffsetAndMetadata().get().get(tp) == null,
                    "offset still there after delete");
        });
        check("admin.delete_consumer_groups", () -> {
            admin.deleteConsumerGroups(List.of("j-auto")).all().get();
            Set<String> ids = new HashSet<>();
            for (ConsumerGroupListing g : admin.listConsumerGroups().all().get()) ids.add(g.groupId());
            require(!ids.contains("j-auto"), "j-auto still listed");
        });
        check("admin.delete_records", () -> {
            TopicPartition tp = new TopicPartition("j-time", 0);
            long low = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(3))).lowWatermarks().get(tp).get().lowWatermark();
            require(low == 3, "low watermark " + low);
            require(admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).all().get().get(tp).offset() == 3, "earliest after");
        });
        check("admin.describe_log_dirs", () -> {
            int node = admin.describeCluster().nodes().get().iterator().next().id();
            Map<String, LogDirDescription> dirs = admin.describeLogDirs(List.of(node)).allDescriptions().get().get(node);
            require(!dirs.isEmpty(), "no log dirs");
            boolean found = dirs.values().stream().anyMatch(d -> d.replicaInfos().containsKey(new TopicPartition("j-codec-none", 0))
                    && d.replicaInfos().get(new TopicPartition("j-codec-none", 0)).size() > 0);
            require(found, "j-codec-none-0 not in " + dirs.keySet());
        });
        check("admin.describe_producers", () -> {
            TopicPartition tp = new TopicPartition("j-codec-lz4", 0);
            List<ProducerState> states = admin.describeProducers(List.of(tp)).all().get().get(tp).activeProducers();
            require(states.size() == 1 && states.get(0).lastSequence() == 99, "producers " + states);
        });
        check("admin.describe_features", () -> admin.describeFeatures().featureMetadata().get());
        check("admin.describe_acls_security_disabled", () -> {
            try {
                admin.describeAcls(AclBindingFilter.ANY).values().get();
                throw new AssertionError("describeAcls succeeded without an authorizer");
            } catch (java.util.concurrent.ExecutionException e) {
                require(e.getCause() instanceof SecurityDisabledException, "got " + e.getCause());
            }
        });
        check("admin.list_transactions", () -> admin.listTransactions().all().get());
        check("admin.elect_leaders_not_needed", () -> {
            TopicPartition tp = new TopicPartition("j-groups", 0);
            Map<TopicPartition, Optional<Throwable>> r = admin.electLeaders(ElectionType.PREFERRED, Set.of(tp)).partitions().get();
            require(r.get(tp).isPresent() && r.get(tp).get() instanceof ElectionNotNeededException, "election " + r);
        });
        check("admin.delete_topics", () -> {
            admin.deleteTopics(List.of("j-admin")).all().get();
            waitFor("j-admin gone", 10_000, () -> {
                try { return !admin.listTopics().names().get().contains("j-admin"); } catch (Exception e) { return false; }
            });
        });

        admin.close(Duration.ofSeconds(5));
        System.out.println("DONE " + passed + " " + failed);
        System.exit(failed == 0 ? 0 : 1);
    }

    /** Two members share a 4-partition topic; with cooperative, a third joins and only moved partitions are revoked. */
    static void groupCheck(String group, String topic, String assignor, boolean cooperative) throws Exception {
        List<KafkaConsumer<String, String>> members = new ArrayList<>();
        List<Set<TopicPartition>> owned = new ArrayList<>();
        List<String> badRevocations = new ArrayList<>();
        Set<String> seen = new HashSet<>();
        try {
            for (int i = 0; i < (cooperative ? 3 : 2); i++) {
                KafkaConsumer<String, String> c = consumer(group, assignor, false);
                Set<TopicPartition> mine = new HashSet<>();
                int idx = i;
                c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                    public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                        if (cooperative && !parts.isEmpty() && parts.containsAll(mine) && mine.size() > 1)
                            badRevocations.add("member " + idx + " lost all of " + mine);
                        mine.removeAll(parts);
                    }
                    public void onPartitionsAssigned(Collection<TopicPartition> parts) { mine.addAll(parts); }
                    public void onPartitionsLost(Collection<TopicPartition> parts) { mine.removeAll(parts); }
                });
                members.add(c);
                owned.add(mine);
            }
            int active = 2;
            long end = System.currentTimeMillis() + 60_000;
            while (System.currentTimeMillis() < end) {
                for (int i = 0; i < active; i++)
                    for (ConsumerRecord<String, String> r : members.get(i).poll(Duration.ofMillis(50)))
                        seen.add(r.partition() + ":" + r.offset());
                Set<TopicPartition> union = new HashSet<>();
                int total = 0;
                for (int i = 0; i < active; i++) { union.addAll(owned.get(i)); total += owned.get(i).size(); }
                boolean balanced = union.size() == 4 && total == 4;
                for (int i = 0; i < active; i++) balanced &= !owned.get(i).isEmpty();
                if (balanced && seen.size() == 40) {
                    if (active == members.size()) break;
                    active++;  // cooperative: a third member joins a stable, fully read group
                }
            }
            require(seen.size() == 40, "read " + seen.size() + " distinct records of 40");
            for (int i = 0; i < active; i++) require(!owned.get(i).isEmpty(), "member " + i + " owns nothing: " + owned);
            require(active == members.size(), "group never settled with " + members.size() + " members: " + owned);
            require(badRevocations.isEmpty(), "cooperative rebalance revoked everything: " + badRevocations);
            // every owner reads its partitions to the end (a new owner starts over: nothing was committed)
            long until = System.currentTimeMillis() + 30_000;
            boolean atEnd = false;
            while (!atEnd && System.currentTimeMillis() < until) {
                atEnd = true;
                for (int i = 0; i < active; i++) {
                    members.get(i).poll(Duration.ofMillis(50));
                    for (TopicPartition tp : owned.get(i)) atEnd &= members.get(i).position(tp) == 10;
                }
            }
            require(atEnd, "owners did not reach the end of their partitions");
            for (int i = 0; i < active; i++) members.get(i).commitSync();
        } finally {
            for (KafkaConsumer<String, String> c : members) c.close(Duration.ofSeconds(5));
        }
        Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(group)
                .partitionsToOffsetAndMetadata().get(TIMEOUT_S, TimeUnit.SECONDS);
        require(committed.size() == 4, "committed " + committed);
        committed.forEach((tp, om) -> require(om.offset() == 10, tp + " committed at " + om.offset()));
    }
}
