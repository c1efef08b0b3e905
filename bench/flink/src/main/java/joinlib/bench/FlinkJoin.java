package joinlib.bench;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import java.io.BufferedWriter;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.common.RuntimeExecutionMode;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.JobManagerOptions;
import org.apache.flink.configuration.RestOptions;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.runtime.util.EnvironmentInformation;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.co.ProcessJoinFunction;
import org.apache.flink.util.Collector;

/**
 * bench/flink_compare.py's Flink job: the 3-way chain S1.J = S2.J, S2.J = S3.J over three JSON topics
 * (one per site; records {"id", "ts" (event time, ms), "J", "payload"}), a combination being a result iff
 * |t_i - t_j| <= window for the three pairs (joinlib's semantics for equal windows: max - min <= window).
 *
 * <p>DataStream API in a local mini-cluster: a KafkaSource per topic, bounded at the end offsets the topics
 * have when the job starts (the job ends once they are drained), watermarks from ts with bounded
 * out-of-orderness (joinlib's max delay), S1 and S2 interval-joined on J within [-window, +window], the pairs
 * interval-joined with S3 on J within [-window, +window] of the pair's timestamp (Flink: the later of the
 * two) and kept iff S3's ts is within the window of both; heap (hashmap) state; every operator at the same
 * parallelism. Results go to a sink that counts them and, with --ids, writes "id1 id2 id3 ts" lines (ts:
 * the latest of the three event times) to FILE.&lt;subtask&gt;. A result is the three ids and ts, as joinlib's
 * are: the payload of a record is parsed past and dropped, unless --keep-payload true keeps it in the join
 * state and the results.
 *
 * <p>Prints one JSON line on stdout at the end: counts, wall-clock times (ms since the epoch) and the CPU
 * time of this JVM (all threads) when the job was submitted and when it ended.
 */
public final class FlinkJoin {

    /** One record of a source topic. */
    public static final class Event {
        public long id;
        public long ts;
        public String j;
        public String payload;

        public Event() {}
    }

    /** An S1-S2 match. */
    public static final class Pair {
        public long id1;
        public long id2;
        public long ts1;
        public long ts2;
        public String j;
        public String p1;
        public String p2;

        public Pair() {}
    }

    /** An S1-S2-S3 result. */
    public static final class Result {
        public long id1;
        public long id2;
        public long id3;
        public long ts;
        public String j;
        public String p1;
        public String p2;
        public String p3;

        public Result() {}
    }

    // the mini-cluster runs in this JVM: the tasks report here
    static final AtomicLong RECORDS = new AtomicLong();
    static final AtomicLong RESULTS = new AtomicLong();
    static final AtomicLong FIRST_RECORD_MS = new AtomicLong();
    static final AtomicLong LAST_RESULT_MS = new AtomicLong();

    /** The JSON of a record (any field order; unknown fields skipped). */
    static final class EventSchema implements DeserializationSchema<Event> {
        private final boolean keepPayload;
        private transient JsonFactory json;

        EventSchema(boolean keepPayload) {
            this.keepPayload = keepPayload;
        }

        @Override
        public Event deserialize(byte[] message) throws IOException {
            if (FIRST_RECORD_MS.get() == 0) {
                FIRST_RECORD_MS.compareAndSet(0, System.currentTimeMillis());
            }
            if (json == null) {
                json = new JsonFactory();
            }
            Event e = new Event();
            try (JsonParser p = json.createParser(message)) {
                if (p.nextToken() != JsonToken.START_OBJECT) {
                    throw new IOException("not a JSON object");
                }
                while (p.nextToken() == JsonToken.FIELD_NAME) {
                    String name = p.currentName();
                    p.nextToken();
                    switch (name) {
                        case "id": e.id = p.getLongValue(); break;
                        case "ts": e.ts = p.getLongValue(); break;
                        case "J": e.j = p.getValueAsString(); break;
                        case "payload":
                            if (keepPayload) {
                                e.payload = p.getText();
                            }
                            break;
                        default: p.skipChildren();
                    }
                }
            }
            RECORDS.incrementAndGet();
            return e;
        }

        @Override
        public boolean isEndOfStream(Event next) {
            return false;
        }

        @Override
        public TypeInformation<Event> getProducedType() {
            return TypeInformation.of(Event.class);
        }
    }

    /** Counts the results; with a path, writes them as "id1 id2 id3 ts" lines to path.&lt;subtask&gt;. */
    static final class CountingSink implements Sink<Result> {
        private final String path;

        CountingSink(String path) {
            this.path = path;
        }

        @Override
        public SinkWriter<Result> createWriter(WriterInitContext context) throws IOException {
            int subtask = context.getTaskInfo().getIndexOfThisSubtask();
            BufferedWriter out = path == null ? null
                    : Files.newBufferedWriter(Paths.get(path + "." + subtask), StandardCharsets.US_ASCII);
            return new SinkWriter<>() {
                long n;
                long last;

                @Override
                public void write(Result r, Context ctx) throws IOException {
                    n++;
                    last = System.currentTimeMillis();
                    if (out != null) {
                        out.write(r.id1 + " " + r.id2 + " " + r.id3 + " " + r.ts + "\n");
                    }
                }

                @Override
                public void flush(boolean endOfInput) throws IOException {
                    if (out != null) {
                        out.flush();
                    }
                }

                @Override
                public void close() throws IOException {
                    RESULTS.addAndGet(n);
                    LAST_RESULT_MS.accumulateAndGet(last, Math::max);
                    if (out != null) {
                        out.close();
                    }
                }
            };
        }
    }

    static KafkaSource<Event> source(String bootstrap, String topic, String group, boolean keepPayload) {
        return KafkaSource.<Event>builder()
                .setBootstrapServers(bootstrap)
                .setTopics(topic)
                .setGroupId(group)
                .setStartingOffsets(OffsetsInitializer.earliest())
                .setBounded(OffsetsInitializer.latest())
                .setValueOnlyDeserializer(new EventSchema(keepPayload))
                .build();
    }

    /**
     * The shape of both join stages: {@code left} (S1, or the S1-S2 pairs) and {@code right} (S2, or S3) keyed
     * on J and interval-joined within [-window, +window] of the left element's timestamp (both bounds inclusive),
     * each match through {@code join}; the operator named {@code name}. {@code join} must be a class with
     * its type arguments (an anonymous class, not a lambda): Flink reads the output type from it.
     */
    static <L, O> DataStream<O> joinOnJ(DataStream<L> left, KeySelector<L, String> leftJ, DataStream<Event> right,
            long window, ProcessJoinFunction<L, Event, O> join, String name) {
        return left.keyBy(leftJ, Types.STRING)
                .intervalJoin(right.keyBy(e -> e.j, Types.STRING))
                .between(Duration.ofMillis(-window), Duration.ofMillis(window))
                .process(join)
                .name(name);
    }

    static long cpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime();
    }

    /**
     * --topics S1,S2,S3 [--bootstrap HOST:PORT] [--window MS] [--delay MS] [--parallelism N] [--ids FILE]
     * [--keep-payload true|false].
     */
    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            if (!argv[i].startsWith("--")) {
                throw new IllegalArgumentException("expected --name value pairs, got " + argv[i]);
            }
            a.put(argv[i].substring(2), argv[i + 1]);
        }
        String bootstrap = a.getOrDefault("bootstrap", "127.0.0.1:9092");
        String[] topics = a.getOrDefault("topics", "").split(",");
        if (topics.length != 3) {
            throw new IllegalArgumentException("--topics: three topics, S1,S2,S3");
        }
        long window = Long.parseLong(a.getOrDefault("window", "3000"));
        long delay = Long.parseLong(a.getOrDefault("delay", "80"));
        int parallelism = Integer.parseInt(a.getOrDefault("parallelism", "2"));
        String ids = a.get("ids");
        boolean keepPayload = Boolean.parseBoolean(a.getOrDefault("keep-payload", "false"));
        String group = "joinlib-flink-" + UUID.randomUUID();

        Configuration conf = new Configuration();
        conf.set(StateBackendOptions.STATE_BACKEND, "hashmap");
        // loopback only, any free port (several benchmarks may share the machine)
        conf.set(RestOptions.BIND_ADDRESS, "127.0.0.1");
        conf.set(RestOptions.ADDRESS, "127.0.0.1");
        conf.set(RestOptions.BIND_PORT, "0");
        conf.set(JobManagerOptions.ADDRESS, "127.0.0.1");
        conf.set(JobManagerOptions.BIND_HOST, "127.0.0.1");   // the blob server's
        conf.set(TaskManagerOptions.HOST, "127.0.0.1");
        conf.set(TaskManagerOptions.BIND_HOST, "127.0.0.1");
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(parallelism, conf);
        env.setRuntimeMode(RuntimeExecutionMode.STREAMING);

        WatermarkStrategy<Event> wm = WatermarkStrategy.<Event>forBoundedOutOfOrderness(Duration.ofMillis(delay))
                .withTimestampAssigner((e, previous) -> e.ts);
        DataStream<Event> s1 = env.fromSource(source(bootstrap, topics[0], group, keepPayload), wm, "S1");
        DataStream<Event> s2 = env.fromSource(source(bootstrap, topics[1], group, keepPayload), wm, "S2");
        DataStream<Event> s3 = env.fromSource(source(bootstrap, topics[2], group, keepPayload), wm, "S3");

        // |t1 - t2| <= window (both bounds inclusive); a pair's timestamp is max(t1, t2)
        DataStream<Pair> s12 = joinOnJ(s1, e -> e.j, s2, window, new ProcessJoinFunction<Event, Event, Pair>() {
            @Override
            public void processElement(Event l, Event r, Context ctx, Collector<Pair> out) {
                Pair p = new Pair();
                p.id1 = l.id;
                p.id2 = r.id;
                p.ts1 = l.ts;
                p.ts2 = r.ts;
                p.j = l.j;
                p.p1 = l.payload;
                p.p2 = r.payload;
                out.collect(p);
            }
        }, "S1-S2 interval join");
        // |t3 - max(t1, t2)| <= window lets through every t3 in [max - window, min + window], the
        // combinations with |t3 - t1| <= window and |t3 - t2| <= window; the filter keeps exactly those
        DataStream<Result> s123 = joinOnJ(s12, p -> p.j, s3, window, new ProcessJoinFunction<Pair, Event, Result>() {
            @Override
            public void processElement(Pair l, Event r, Context ctx, Collector<Result> out) {
                if (Math.abs(r.ts - l.ts1) > window || Math.abs(r.ts - l.ts2) > window) {
                    return;
                }
                Result x = new Result();
                x.id1 = l.id1;
                x.id2 = l.id2;
                x.id3 = r.id;
                x.ts = Math.max(Math.max(l.ts1, l.ts2), r.ts);
                x.j = l.j;
                x.p1 = l.p1;
                x.p2 = l.p2;
                x.p3 = r.payload;
                out.collect(x);
            }
        }, "(S1-S2)-S3 interval join");
        s123.sinkTo(new CountingSink(ids)).name("count results");

        long cpu0 = cpuNanos();
        long t0 = System.currentTimeMillis();
        JobClient job = env.executeAsync("joinlib-flink-compare");   // the mini-cluster is up, the job submitted
        long submitted = System.currentTimeMillis();
        long cpuSubmitted = cpuNanos();
        JobExecutionResult result = job.getJobExecutionResult().get();
        long finished = System.currentTimeMillis();
        long cpuEnd = cpuNanos();
        System.out.println("{\"flink_version\": \"" + EnvironmentInformation.getVersion() + "\""
                + ", \"parallelism\": " + parallelism + ", \"keep_payload\": " + keepPayload + ", \"window_ms\": " + window + ", \"delay_ms\": " + delay
                + ", \"records\": " + RECORDS.get() + ", \"results\": " + RESULTS.get()
                + ", \"execute_ms\": " + t0 + ", \"submitted_ms\": " + submitted
                + ", \"first_record_ms\": " + FIRST_RECORD_MS.get() + ", \"last_result_ms\": " + LAST_RESULT_MS.get()
                + ", \"finished_ms\": " + finished + ", \"net_runtime_ms\": " + result.getNetRuntime()
                + ", \"cpu_before_execute_s\": " + cpu0 / 1e9 + ", \"cpu_submitted_s\": " + cpuSubmitted / 1e9
                + ", \"cpu_end_s\": " + cpuEnd / 1e9 + "}");
        System.out.flush();
        System.exit(0);
    }
}
