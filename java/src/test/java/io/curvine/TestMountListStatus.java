package io.curvine;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;

import java.io.File;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.attribute.FileTime;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.junit.Rule;
import org.junit.Test;
import org.junit.rules.Timeout;

/**
 * {@code listStatus} of a directory under a mounted S3 bucket: a real S3 server (s3s-fs,
 * installed by {@code bin/setup.sh}) on a free loopback port, mounted with {@code cv
 * mount}; the names, sizes and mtimes are the objects', common prefixes are directories.
 */
public class TestMountListStatus {
  @Rule public Timeout timeout = Timeout.seconds(120);

  private static final String KEY = "curvine-java-key";
  private static final String SECRET = "curvine-java-secret";
  /** Whole seconds: S3 gives an object's time to the second. */
  private static final long MTIME_S = 1_600_000_000L;

  private static Path s3sFs() {
    String env = System.getenv("S3S_FS");
    if (env != null && !env.isEmpty()) {
      return Paths.get(env);
    }
    List<String> dirs = new ArrayList<>(Arrays.asList(
        System.getenv().getOrDefault("PATH", "").split(File.pathSeparator)));
    dirs.add(System.getProperty("user.home") + "/.cargo/bin");
    for (String d : dirs) {
      Path p = Paths.get(d, "s3s-fs");
      if (Files.isExecutable(p)) {
        return p;
      }
    }
    throw new IllegalStateException("s3s-fs not found: run bin/setup.sh (cargo install s3s-fs)");
  }

  /** An object of {@code len} bytes at {@code key} of the bucket dir, with the test's mtime. */
  private static byte[] object(Path bucket, String key, int len) throws IOException {
    byte[] b = new byte[len];
    for (int i = 0; i < len; i++) {
      b[i] = (byte) (key.hashCode() + i * 31);
    }
    Path p = bucket.resolve(key);
    Files.createDirectories(p.getParent());
    Files.write(p, b);
    Files.setLastModifiedTime(p, FileTime.from(MTIME_S, TimeUnit.SECONDS));
    return b;
  }

  private static void run(String what, String... cmd) throws Exception {
    Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
    byte[] out = readAll(p);
    if (!p.waitFor(60, TimeUnit.SECONDS) || p.exitValue() != 0) {
      throw new IOException(what + " failed: " + new String(out, StandardCharsets.UTF_8));
    }
  }

  private static byte[] readAll(Process p) throws IOException {
    try (java.io.InputStream in = p.getInputStream()) {
      java.io.ByteArrayOutputStream b = new java.io.ByteArrayOutputStream();
      byte[] buf = new byte[8192];
      int n;
      while ((n = in.read(buf)) > 0) {
        b.write(buf, 0, n);
      }
      return b.toByteArray();
    }
  }

  private static void awaitListening(int port, Process p) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    while (System.nanoTime() < deadline) {
      if (!p.isAlive()) {
        throw new IOException("s3s-fs exited with " + p.exitValue());
      }
      try (Socket s = new Socket()) {
        s.connect(new InetSocketAddress("127.0.0.1", port), 500);
        return;
      } catch (IOException e) {
        Thread.sleep(50);
      }
    }
    throw new IOException("s3s-fs not listening on " + port + " within 30 s");
  }

  private static FileStatus[] sorted(FileStatus[] st) {
    Arrays.sort(st, Comparator.comparing(s -> s.getPath().getName()));
    return st;
  }

  private static String[] names(FileStatus[] st) {
    return Arrays.stream(st).map(s -> s.getPath().getName()).toArray(String[]::new);
  }

  @Test
  public void listStatusOfAMountedBucketShowsItsObjects() throws Exception {
    CurvineCluster cluster = CurvineCluster.get();
    Path root = Files.createTempDirectory("curvine-java-s3");
    Path bucket = root.resolve("jbkt");
    byte[] a = object(bucket, "pre/a.txt", 10);
    object(bucket, "pre/empty", 0);
    object(bucket, "pre/dir/x", 3);
    object(bucket, "pre/dir/sub/y", 5);
    object(bucket, "pre/ünï 日本.bin", 7);
    object(bucket, "other/z", 1); // outside the mount's prefix
    int port = CurvineCluster.freePort();
    Process s3 = new ProcessBuilder(s3sFs().toString(), "--host", "127.0.0.1", "--port",
        String.valueOf(port), "--access-key", KEY, "--secret-key", SECRET, root.toString())
        .redirectErrorStream(true)
        .redirectOutput(root.resolve("s3s-fs.log").toFile())
        .start();
    String cv = CurvineCluster.binary("cv", "curvine-client").toString();
    String conf = cluster.confFile().toString();
    String mnt = "/java-s3-mount";
    try {
      awaitListening(port, s3);
      run("cv mount", cv, "--conf", conf, "mount", "s3://jbkt/pre", mnt,
          "-o", "endpoint=http://127.0.0.1:" + port, "-o", "region=us-east-1",
          "-o", "access_key_id=" + KEY, "-o", "secret_access_key=" + SECRET);
      try (FileSystem fs = FileSystem.newInstance(cluster.uri(), cluster.conf())) {
        FileStatus[] top = sorted(fs.listStatus(new org.apache.hadoop.fs.Path(mnt)));
        assertArrayEquals(new String[] {"a.txt", "dir", "empty", "ünï 日本.bin"}, names(top));
        long[] lens = {10, 0, 0, 7};
        for (int i = 0; i < top.length; i++) {
          FileStatus s = top[i];
          String n = s.getPath().getName();
          assertEquals(n, "dir".equals(n), s.isDirectory());
          assertEquals(n, !"dir".equals(n), s.isFile());
          assertEquals(n, lens[i], s.getLen());
          if (s.isFile()) {
            assertEquals(n, MTIME_S * 1000, s.getModificationTime());
          }
          assertEquals(mnt + "/" + n, s.getPath().toUri().getPath());
        }
        FileStatus[] dir = sorted(fs.listStatus(new org.apache.hadoop.fs.Path(mnt + "/dir")));
        assertArrayEquals(new String[] {"sub", "x"}, names(dir));
        assertTrue(dir[0].isDirectory());
        assertFalse(dir[1].isDirectory());
        assertEquals(3, dir[1].getLen());
        assertEquals(MTIME_S * 1000, dir[1].getModificationTime());
        FileStatus[] sub = fs.listStatus(new org.apache.hadoop.fs.Path(mnt + "/dir/sub"));
        assertArrayEquals(new String[] {"y"}, names(sub));
        assertEquals(5, sub[0].getLen());
        // and the bytes read through a worker are the object's
        byte[] got = new byte[a.length];
        try (FSDataInputStream in = fs.open(new org.apache.hadoop.fs.Path(mnt + "/a.txt"))) {
          in.readFully(0, got);
        }
        assertArrayEquals(a, got);
      }
    } finally {
      try {
        run("cv umount", cv, "--conf", conf, "umount", mnt);
      } finally {
        s3.destroyForcibly();
        s3.waitFor(10, TimeUnit.SECONDS);
        try (Stream<Path> s = Files.walk(root)) {
          s.sorted(Comparator.reverseOrder()).map(Path::toFile).forEach(File::delete);
        }
      }
    }
  }
}
