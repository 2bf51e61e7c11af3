// Runs many of Kafka's command-line tools in ONE JVM (each bin/*.sh would start its own, seconds each).
//
//   java -cp "$KAFKA_HOME/libs/*" ToolRunner.java PLAN OUTDIR
//
// PLAN: one tool run per line, tab-separated: name, main class, stdin (\n escaped as \\n), arguments...
// For each run, OUTDIR/name.out, name.err and name.code (exit status; "timeout" when it did not
// finish within 60 s) are written. Kafka's tools end with org.apache.kafka.common.utils.Exit, whose
// exit procedure is replaced here by one that ends only the tool's thread.
import java.io.*;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;

import org.apache.kafka.common.utils.Exit;

public class ToolRunner {
    static final class ToolExit extends RuntimeException {
        final int code;
        ToolExit(int code) { super(null, null, false, false); this.code = code; }
    }

    public static void main(String[] args) throws Exception {
        List<String> plan = Files.readAllLines(Path.of(args[0]), StandardCharsets.UTF_8);
        Path outDir = Path.of(args[1]);
        PrintStream realOut = System.out, realErr = System.err;
        InputStream realIn = System.in;
        // The first Exit.exit of a run is its status (TopicCommand exits inside a try that turns the
        // exception into a second exit with status 1); shutdown hooks a tool adds (the verifiable
        // producer prints its summary from one) run when the tool ends, still captured.
        final Integer[] firstExit = {null};
        final List<Runnable> hooks = new ArrayList<>();
        Exit.setExitProcedure((code, message) -> {
            synchronized (firstExit) { if (firstExit[0] == null) firstExit[0] = code; }
            throw new ToolExit(code);
        });
        Exit.setHaltProcedure((code, message) -> {
            synchronized (firstExit) { if (firstExit[0] == null) firstExit[0] = code; }
            throw new ToolExit(code);
        });
        Exit.setShutdownHookAdder((name, runnable) -> { synchronized (hooks) { hooks.add(runnable); } });
        for (String line : plan) {
            if (line.isBlank()) continue;
            String[] parts = line.split("\t", -1);
            String name = parts[0], cls = parts[1], stdin = parts[2].replace("\\n", "\n");
            String[] toolArgs = Arrays.copyOfRange(parts, 3, parts.length);
            ByteArrayOutputStream out = new ByteArrayOutputStream(), err = new ByteArrayOutputStream();
            PrintStream pout = new PrintStream(out, true, StandardCharsets.UTF_8);
            PrintStream perr = new PrintStream(err, true, StandardCharsets.UTF_8);
            final String[] code = {"0"};
            firstExit[0] = null;
            hooks.clear();
            Set<Thread> before = jvmHooks();
            long t0 = System.nanoTime();
            System.setOut(pout);
            System.setErr(perr);
            System.setIn(new ByteArrayInputStream(stdin.getBytes(StandardCharsets.UTF_8)));
            scalaConsole(pout, perr);
            Thread t = new Thread(() -> {
                try {
                    Method m = Class.forName(cls).getMethod("main", String[].class);
                    m.invoke(null, (Object) toolArgs);
                } catch (java.lang.reflect.InvocationTargetException e) {
                    Throwable c = e.getCause();
                    if (c instanceof ToolExit) code[0] = Integer.toString(((ToolExit) c).code);
                    else { code[0] = "exception"; c.printStackTrace(perr); }
                } catch (ToolExit e) {
                    code[0] = Integer.toString(e.code);
                } catch (Throwable e) {
                    code[0] = "exception";
                    e.printStackTrace(perr);
                }
            }, "tool-" + name);
            t.setDaemon(true);
            t.start();
            t.join(60_000);
            List<Runnable> toRun;
            synchronized (hooks) { toRun = new ArrayList<>(hooks); }
            // tools that register with Runtime.addShutdownHook directly (the verifiable producer)
            for (Thread hook : jvmHooks()) {
                if (!before.contains(hook) && Runtime.getRuntime().removeShutdownHook(hook)) toRun.add(hook::run);
            }
            for (Runnable hook : toRun) {
                try { hook.run(); } catch (Throwable e) { e.printStackTrace(perr); }
            }
            if (t.isAlive()) code[0] = "timeout";
            else if (firstExit[0] != null && !code[0].equals("exception")) code[0] = Integer.toString(firstExit[0]);
            System.setOut(realOut);
            System.setErr(realErr);
            System.setIn(realIn);
            pout.flush();
            perr.flush();
            Files.write(outDir.resolve(name + ".out"), out.toByteArray());
            Files.write(outDir.resolve(name + ".err"), err.toByteArray());
            Files.writeString(outDir.resolve(name + ".code"), code[0]);
            realOut.println(name + " " + code[0] + " " + (System.nanoTime() - t0) / 1_000_000 + " ms");
            realOut.flush();
        }
        Runtime.getRuntime().halt(0);  // tools may leave non-daemon threads behind
    }

    /** Scala's Console (println in the Scala tools: DumpLogSegments, ConfigCommand) keeps the streams it
     *  first saw in an inheritable thread-local: point it at this run's (the tool thread inherits them). */
    static void scalaConsole(PrintStream out, PrintStream err) {
        try {
            Class<?> c = Class.forName("scala.Console$");
            Object console = c.getField("MODULE$").get(null);
            for (String[] v : new String[][] {{"outVar", "out"}, {"errVar", "err"}}) {
                java.lang.reflect.Field f = c.getDeclaredField(v[0]);
                f.setAccessible(true);
                Object dynamic = f.get(console);
                dynamic.getClass().getMethod("value_$eq", Object.class).invoke(dynamic, v[1].equals("out") ? out : err);
            }
        } catch (ReflectiveOperationException | RuntimeException e) {
            // no Scala on the class path: nothing to redirect
        }
    }

    /** The JVM's registered shutdown hooks (needs --add-opens java.base/java.lang=ALL-UNNAMED). */
    @SuppressWarnings("unchecked")
    static Set<Thread> jvmHooks() {
        try {
            java.lang.reflect.Field f = Class.forName("java.lang.ApplicationShutdownHooks").getDeclaredField("hooks");
            f.setAccessible(true);
            synchronized (Class.forName("java.lang.ApplicationShutdownHooks")) {
                return new HashSet<>(((Map<Thread, Thread>) f.get(null)).keySet());
            }
        } catch (ReflectiveOperationException | RuntimeException e) {
            return Set.of();
        }
    }
}
