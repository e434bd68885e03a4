package io.curvine;

import java.io.File;
import java.io.IOException;
import java.net.ServerSocket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.stream.Stream;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;

/**
 * A real cluster for the tests: {@code curvine-server master} and one worker as
 * processes on free 127.0.0.1 ports with temporary directories, started once per test
 * JVM (every test class shares it) and stopped by a shutdown hook.
 */
public final class CurvineCluster {
  private static CurvineCluster instance;

  private final Path dir;
  private final int masterPort;
  private final List<Process> procs = new ArrayList<>();

  private CurvineCluster(Path dir, int masterPort) {
    this.dir = dir;
    this.masterPort = masterPort;
  }

  public static synchronized CurvineCluster get() throws IOException {
    if (instance == null) {
      instance = start();
    }
    return instance;
  }

  public URI uri() {
    return URI.create("cv://127.0.0.1:" + masterPort + "/");
  }

  public int masterPort() {
    return masterPort;
  }

  /** The cluster's configuration file, for {@code cv --conf}. */
  public Path confFile() {
    return dir.resolve("cluster.toml");
  }

  public Configuration conf() {
    Configuration conf = new Configuration();
    conf.set("fs.cv.impl", CurvineFileSystem.class.getName());
    conf.set("fs.AbstractFileSystem.cv.impl", CurvineFs.class.getName());
    conf.set("fs.defaultFS", uri().toString());
    conf.set("fs.cv.connect_timeout", "3s");
    // as the shipped core-site.xml does: master calls go over the master's Unix socket
    conf.set("fs.cv.local_socket", dir.resolve("master.sock").toString());
    // The master reserves a whole block per placement until the next heartbeat; small
    // blocks keep the many tiny files of the contract tests from exhausting the tier.
    conf.set("fs.cv.block_size", "16MB");
    return conf;
  }

  static int freePort() throws IOException {
    try (ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
      s.setReuseAddress(true);
      return s.getLocalPort();
    }
  }

  static Path serverBinary() {
    return binary("curvine-server", "curvine-server");
  }

  /** A binary of the Rust build: {@code curvine.bin.dir}, else the cargo target dir. */
  static Path binary(String name, String cratePackage) {
    String dir = System.getProperty("curvine.bin.dir");
    if (dir == null || dir.isEmpty()) {
      String target = System.getenv("CARGO_TARGET_DIR");
      dir = (target == null ? "../target" : target) + "/release";
    }
    Path bin = Paths.get(dir, name);
    if (!Files.isExecutable(bin)) {
      throw new IllegalStateException(bin + " not found: cargo build --release -p " + cratePackage);
    }
    return bin;
  }

  private static CurvineCluster start() throws IOException {
    Path bin = serverBinary();
    Path shm = Paths.get("/dev/shm");
    Path dataRoot = Files.isDirectory(shm) && Files.isWritable(shm) ? shm
        : Paths.get("/tmp");
    // not java.io.tmpdir (target/, see pom.xml): the master's Unix socket lives in this
    // dir, and a socket path must stay under 108 bytes
    Path dir = Files.createTempDirectory(Paths.get("/tmp"), "curvine-java-test");
    Path data = Files.createTempDirectory(dataRoot, "curvine-java-test-data");
    int master = freePort();
    int worker = freePort();
    String toml = String.join("\n",
        "[cluster]",
        "name = \"java-test\"",
        "[master]",
        "hostname = \"127.0.0.1\"",
        "rpc_port = " + master,
        "web_port = 0",
        "meta_dir = \"" + dir.resolve("meta") + "\"",
        "local_socket = \"" + dir.resolve("master.sock") + "\"",
        // small pages so that every listing in the tests crosses page boundaries
        "list_page_size = 7",
        "[journal]",
        "sync = false",
        "[worker]",
        "hostname = \"127.0.0.1\"",
        "data_port = " + worker,
        "web_port = 0",
        "data_dir = [\"[MEM:8GB]" + data + "\"]",
        "heartbeat_interval = \"1s\"",
        "[client]",
        "master_addrs = [\"127.0.0.1:" + master + "\"]",
        "[log]",
        "level = \"info\"",
        "");
    Path conf = dir.resolve("cluster.toml");
    Files.write(conf, toml.getBytes(StandardCharsets.UTF_8));
    CurvineCluster c = new CurvineCluster(dir, master);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> c.stop(data)));
    c.spawn(bin, "master", conf);
    c.spawn(bin, "worker", conf);
    c.awaitReady();
    return c;
  }

  private void spawn(Path bin, String role, Path conf) throws IOException {
    ProcessBuilder pb = new ProcessBuilder(bin.toString(), role, "--conf", conf.toString());
    pb.redirectErrorStream(true);
    pb.redirectOutput(dir.resolve(role + ".log").toFile());
    procs.add(pb.start());
  }

  /** Until a file can be written and read back (master up, worker registered). */
  private void awaitReady() throws IOException {
    long deadline = System.nanoTime() + 60_000_000_000L;
    Throwable last = null;
    org.apache.hadoop.fs.Path probe = new org.apache.hadoop.fs.Path("/.cluster-ready-probe");
    while (System.nanoTime() < deadline) {
      for (Process p : procs) {
        if (!p.isAlive()) {
          throw new IOException("curvine-server exited with " + p.exitValue() + "; logs in "
              + dir + ":\n" + logs());
        }
      }
      try (FileSystem fs = FileSystem.newInstance(uri(), conf())) {
        try (FSDataOutputStream out = fs.create(probe, true)) {
          out.write(new byte[] {1, 2, 3});
        }
        try (FSDataInputStream in = fs.open(probe)) {
          byte[] b = new byte[3];
          in.readFully(0, b);
        }
        fs.delete(probe, false);
        return;
      } catch (Throwable e) {
        last = e;
      }
      try {
        Thread.sleep(200);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new IOException("interrupted");
      }
    }
    throw new IOException("cluster not ready within 60 s; logs in " + dir + ":\n" + logs(), last);
  }

  private String logs() {
    StringBuilder sb = new StringBuilder();
    for (String role : new String[] {"master", "worker"}) {
      try {
        List<String> lines = Files.readAllLines(dir.resolve(role + ".log"));
        sb.append("--- ").append(role).append(" ---\n");
        for (String l : lines.subList(Math.max(0, lines.size() - 30), lines.size())) {
          sb.append(l).append('\n');
        }
      } catch (IOException e) {
        sb.append("(no ").append(role).append(" log)\n");
      }
    }
    return sb.toString();
  }

  private void stop(Path data) {
    for (Process p : procs) {
      p.destroy();
    }
    for (Process p : procs) {
      try {
        if (!p.waitFor(10, java.util.concurrent.TimeUnit.SECONDS)) {
          p.destroyForcibly();
        }
      } catch (InterruptedException e) {
        p.destroyForcibly();
      }
    }
    if (System.getenv("CURVINE_KEEP_TEST_DIRS") == null) {
      deleteTree(data);
      deleteTree(dir);
    }
  }

  private static void deleteTree(Path p) {
    try (Stream<Path> s = Files.walk(p)) {
      s.sorted(Comparator.reverseOrder()).map(Path::toFile).forEach(File::delete);
    } catch (IOException e) {
      // best effort
    }
  }
}
