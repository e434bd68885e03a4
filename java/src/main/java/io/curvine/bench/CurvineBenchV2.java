package io.curvine.bench;

import io.curvine.CurvineFileSystem;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.zip.CRC32C;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * java-bench: throughput through the Hadoop FileSystem API (fs.write, fs.read) or a
 * FUSE mount (fuse.write, fuse.read). Files, content and the CRC32C manifest are the
 * same as curvine-bench's, so either tool can read what the other wrote.
 *
 * <pre>
 * -action fs.write|fs.read|fuse.write|fuse.read  -dataDir cv://host:port/dir | /dir | /mnt/dir
 * -threads 2 -bufferSize 128kb -fileSize 100mb -fileNum 10 -checksum true -clearDir false
 * -direct true   (fs.*: read/write through direct ByteBuffers; false = byte[])
 * </pre>
 * fs.cv.* settings come from core-site.xml on the classpath and -Dfs.cv.key=value.
 */
public final class CurvineBenchV2 {
  static final String MANIFEST = "_bench_manifest";

  private final String action;
  private final String dataDir;
  private final int threads;
  private final int bufferSize;
  private final long fileSize;
  private final int fileNum;
  private final boolean checksum;
  private final boolean clearDir;
  private final boolean direct;

  CurvineBenchV2(Map<String, String> a) {
    action = req(a, "action");
    dataDir = a.getOrDefault("dataDir", "/curvine-bench");
    threads = Integer.parseInt(a.getOrDefault("threads", "2"));
    bufferSize = (int) size(a.getOrDefault("bufferSize", "128kb"));
    fileSize = size(a.getOrDefault("fileSize", "100mb"));
    fileNum = Integer.parseInt(a.getOrDefault("fileNum", "10"));
    checksum = Boolean.parseBoolean(a.getOrDefault("checksum", "true"));
    clearDir = Boolean.parseBoolean(a.getOrDefault("clearDir", "false"));
    direct = Boolean.parseBoolean(a.getOrDefault("direct", "true"));
    if (threads <= 0 || bufferSize <= 0 || fileNum <= 0 || fileSize < 0) {
      throw new IllegalArgumentException("-threads, -bufferSize, -fileNum must be positive");
    }
  }

  private static String req(Map<String, String> a, String k) {
    String v = a.get(k);
    if (v == null) {
      throw new IllegalArgumentException("missing -" + k);
    }
    return v;
  }

  static long size(String s) {
    String t = s.trim().toLowerCase(Locale.ROOT);
    int i = 0;
    while (i < t.length() && (Character.isDigit(t.charAt(i)) || t.charAt(i) == '.')) {
      i++;
    }
    double v = Double.parseDouble(t.substring(0, i));
    switch (t.substring(i)) {
      case "":
      case "b":
        return (long) v;
      case "k":
      case "kb":
        return (long) (v * (1L << 10));
      case "m":
      case "mb":
        return (long) (v * (1L << 20));
      case "g":
      case "gb":
        return (long) (v * (1L << 30));
      default:
        throw new IllegalArgumentException("bad size " + s);
    }
  }

  static String filePath(String dir, int i) {
    String d = dir.endsWith("/") ? dir.substring(0, dir.length() - 1) : dir;
    return String.format(Locale.ROOT, "%s/file-%06d", d, i);
  }

  /** The same xorshift pattern as curvine-bench. */
  static byte[] pattern(int len) {
    byte[] p = new byte[len];
    long x = 0x9E3779B97F4A7C15L;
    for (int i = 0; i < len; i++) {
      x ^= x << 13;
      x ^= x >>> 7;
      x ^= x << 17;
      p[i] = (byte) x;
    }
    return p;
  }

  /** Pattern stamped with the file index and offset every 4 KiB (as curvine-bench). */
  static void fill(ByteBuffer buf, int n, ByteBuffer pattern, int file, long offset) {
    buf.clear();
    ByteBuffer src = pattern.duplicate();
    src.limit(n);
    buf.put(src);
    int pos = 0;
    while (pos + 16 <= n) {
      long abs = offset + pos;
      if (abs % 4096 == 0) {
        buf.putLong(pos, file);
        buf.putLong(pos + 8, abs);
      }
      pos += (int) (4096 - abs % 4096);
    }
    buf.position(0).limit(n);
  }

  private boolean fuse() {
    return action.startsWith("fuse.");
  }

  private FileSystem openFs() throws IOException {
    Configuration conf = new Configuration();
    conf.setIfUnset("fs.cv.impl", CurvineFileSystem.class.getName());
    Properties props = System.getProperties();
    for (String k : props.stringPropertyNames()) {
      if (k.startsWith("fs.")) {
        conf.set(k, props.getProperty(k));
      }
    }
    URI uri = URI.create(dataDir);
    if (uri.getScheme() == null) {
      uri = URI.create("cv:///");
    }
    return FileSystem.get(uri, conf);
  }

  interface Sink extends AutoCloseable {
    void write(ByteBuffer b) throws IOException;

    @Override
    void close() throws IOException;
  }

  interface Source extends AutoCloseable {
    int read(ByteBuffer b) throws IOException;

    @Override
    void close() throws IOException;
  }

  private Sink create(FileSystem fs, String path) throws IOException {
    if (fuse()) {
      FileChannel ch = FileChannel.open(Paths.get(path), StandardOpenOption.CREATE,
          StandardOpenOption.WRITE, StandardOpenOption.TRUNCATE_EXISTING);
      return new Sink() {
        public void write(ByteBuffer b) throws IOException {
          while (b.hasRemaining()) {
            ch.write(b);
          }
        }

        public void close() throws IOException {
          ch.close();
        }
      };
    }
    FSDataOutputStream out = fs.create(new Path(path), true);
    OutputStream raw = out.getWrappedStream();
    byte[] heap = direct ? null : new byte[bufferSize];
    return new Sink() {
      public void write(ByteBuffer b) throws IOException {
        if (raw instanceof io.curvine.CurvineOutputStream && b.isDirect()) {
          ((io.curvine.CurvineOutputStream) raw).write(b);
        } else {
          int n = b.remaining();
          byte[] h = heap != null && heap.length >= n ? heap : new byte[n];
          b.get(h, 0, n);
          out.write(h, 0, n);
        }
      }

      public void close() throws IOException {
        out.close();
      }
    };
  }

  private Source open(FileSystem fs, String path) throws IOException {
    if (fuse()) {
      FileChannel ch = FileChannel.open(Paths.get(path), StandardOpenOption.READ);
      return new Source() {
        public int read(ByteBuffer b) throws IOException {
          return ch.read(b);
        }

        public void close() throws IOException {
          ch.close();
        }
      };
    }
    FSDataInputStream in = fs.open(new Path(path));
    byte[] heap = new byte[bufferSize];
    return new Source() {
      public int read(ByteBuffer b) throws IOException {
        if (b.isDirect()) {
          return in.read(b);
        }
        int n = in.read(heap, 0, Math.min(heap.length, b.remaining()));
        if (n > 0) {
          b.put(heap, 0, n);
        }
        return n;
      }

      public void close() throws IOException {
        in.close();
      }
    };
  }

  private ByteBuffer allocate() {
    ByteBuffer b = direct || fuse() ? ByteBuffer.allocateDirect(bufferSize)
        : ByteBuffer.allocate(bufferSize);
    return b.order(ByteOrder.LITTLE_ENDIAN);
  }

  private void print(long bytes, double secs) {
    double gib = bytes / (double) (1L << 30);
    System.out.printf(Locale.ROOT, "%s: %d files, %d bytes (%.2f GiB) in %.2f s%n", action,
        fileNum, bytes, gib, secs);
    System.out.printf(Locale.ROOT, "%s: %.2f GiB/s%n", action, gib / Math.max(secs, 1e-9));
  }

  private void writeManifest(FileSystem fs, int[] crcs) throws IOException {
    StringBuilder sb = new StringBuilder();
    sb.append(fileNum).append(' ').append(fileSize).append('\n');
    for (int i = 0; i < crcs.length; i++) {
      sb.append(i).append(' ').append(String.format(Locale.ROOT, "%08x", crcs[i])).append('\n');
    }
    byte[] b = sb.toString().getBytes(StandardCharsets.UTF_8);
    String p = manifestPath();
    if (fuse()) {
      Files.write(Paths.get(p), b);
    } else {
      try (FSDataOutputStream out = fs.create(new Path(p), true)) {
        out.write(b);
      }
    }
  }

  private String manifestPath() {
    return (dataDir.endsWith("/") ? dataDir : dataDir + "/") + MANIFEST;
  }

  private int[] readManifest(FileSystem fs) throws IOException {
    byte[] b;
    if (fuse()) {
      b = Files.readAllBytes(Paths.get(manifestPath()));
    } else {
      try (InputStream in = fs.open(new Path(manifestPath()))) {
        b = in.readAllBytes();
      }
    }
    String[] lines = new String(b, StandardCharsets.UTF_8).split("\n");
    if (!lines[0].equals(fileNum + " " + fileSize)) {
      throw new IOException("the write ran with files/size \"" + lines[0]
          + "\"; pass the same -fileNum and -fileSize");
    }
    int[] crcs = new int[fileNum];
    for (int i = 1; i <= fileNum; i++) {
      crcs[i - 1] = Integer.parseUnsignedInt(lines[i].split(" ")[1], 16);
    }
    return crcs;
  }

  static int fold(int[] crcs) {
    int total = 0;
    for (int c : crcs) {
      total = Integer.rotateLeft(total, 1) ^ c;
    }
    return total;
  }

  int run() throws Exception {
    boolean write = action.endsWith(".write");
    if (!action.matches("(fs|fuse)\\.(write|read)")) {
      throw new IllegalArgumentException("unknown -action " + action
          + " (expected fs.write, fs.read, fuse.write or fuse.read)");
    }
    FileSystem fs = fuse() ? null : openFs();
    if (write) {
      if (fuse()) {
        Files.createDirectories(Paths.get(dataDir));
        if (clearDir) {
          for (int i = 0; Files.exists(Paths.get(filePath(dataDir, i))); i++) {
            Files.delete(Paths.get(filePath(dataDir, i)));
          }
        }
      } else {
        if (clearDir) {
          fs.delete(new Path(dataDir), true);
        }
        fs.mkdirs(new Path(dataDir));
      }
    }
    int[] expected = !write && checksum ? readManifest(fs) : null;
    ByteBuffer pat = ByteBuffer.allocateDirect(bufferSize);
    pat.put(pattern(bufferSize)).flip();
    int[] crcs = new int[fileNum];
    long[] sizes = new long[fileNum];
    AtomicInteger next = new AtomicInteger();
    ExecutorService pool = Executors.newFixedThreadPool(threads);
    long start = System.nanoTime();
    List<Future<Void>> tasks = new ArrayList<>();
    for (int t = 0; t < threads; t++) {
      tasks.add(pool.submit(() -> {
        ByteBuffer buf = allocate();
        CRC32C crc = new CRC32C();
        for (int i = next.getAndIncrement(); i < fileNum; i = next.getAndIncrement()) {
          String path = filePath(dataDir, i);
          crc.reset();
          long total = 0;
          if (write) {
            try (Sink out = create(fs, path)) {
              for (long off = 0; off < fileSize; off += bufferSize) {
                int n = (int) Math.min(bufferSize, fileSize - off);
                fill(buf, n, pat, i, off);
                if (checksum) {
                  crc.update(buf.duplicate());
                }
                out.write(buf);
                total += n;
              }
            }
          } else {
            try (Source in = open(fs, path)) {
              while (true) {
                buf.clear();
                int n = in.read(buf);
                if (n < 0) {
                  break;
                }
                if (checksum) {
                  buf.flip();
                  crc.update(buf);
                }
                total += n;
              }
            }
            if (total != fileSize) {
              throw new IOException(path + ": read " + total + " bytes, expected " + fileSize);
            }
          }
          sizes[i] = total;
          crcs[i] = (int) crc.getValue();
        }
        return null;
      }));
    }
    for (Future<Void> f : tasks) {
      f.get();
    }
    double secs = (System.nanoTime() - start) / 1e9;
    pool.shutdown();
    long bytes = 0;
    for (long s : sizes) {
      bytes += s;
    }
    print(bytes, secs);
    int rc = 0;
    if (checksum) {
      System.out.printf(Locale.ROOT, "%s: checksum %08x%n", action, fold(crcs));
      if (write) {
        writeManifest(fs, crcs);
      } else {
        int bad = 0;
        int first = -1;
        for (int i = 0; i < fileNum; i++) {
          if (crcs[i] != expected[i]) {
            bad++;
            first = first < 0 ? i : first;
          }
        }
        if (bad > 0) {
          System.err.printf(Locale.ROOT, "%s: checksum mismatch in %d file(s), first %s%n",
              action, bad, filePath(dataDir, first));
          rc = 1;
        } else {
          System.out.println(action + ": checksum matches the write");
        }
      }
    }
    if (fs != null) {
      fs.close();
    }
    return rc;
  }

  static Map<String, String> parse(String[] args) {
    Map<String, String> m = new HashMap<>();
    for (int i = 0; i < args.length; i++) {
      String a = args[i];
      if (!a.startsWith("-") || a.length() < 2) {
        throw new IllegalArgumentException("unexpected argument " + a);
      }
      String k = a.substring(1);
      if (k.equals("clearDir") && (i + 1 >= args.length || args[i + 1].startsWith("-"))) {
        m.put(k, "true");
        continue;
      }
      if (i + 1 >= args.length) {
        throw new IllegalArgumentException("missing value for " + a);
      }
      m.put(k, args[++i]);
    }
    return m;
  }

  public static void main(String[] args) {
    try {
      System.exit(new CurvineBenchV2(parse(args)).run());
    } catch (Exception e) {
      System.err.println("java-bench: " + e);
      Throwable c = e.getCause();
      if (c != null) {
        System.err.println("  caused by: " + c);
      }
      System.exit(2);
    }
  }
}
