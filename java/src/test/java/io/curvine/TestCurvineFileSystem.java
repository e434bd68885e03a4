package io.curvine;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.EOFException;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.BlockLocation;
import org.apache.hadoop.fs.CreateFlag;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.FileContext;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Options;
import org.apache.hadoop.fs.ParentNotDirectoryException;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathIsNotEmptyDirectoryException;
import org.apache.hadoop.fs.XAttrSetFlag;
import org.apache.hadoop.fs.permission.FsPermission;
import org.junit.After;
import org.junit.Before;
import org.junit.BeforeClass;
import org.junit.Rule;
import org.junit.Test;
import org.junit.rules.TestName;
import org.junit.rules.Timeout;

/** The JNI layer and the FileSystem beyond the contract tests, against a real cluster. */
public class TestCurvineFileSystem {
  @Rule public Timeout timeout = Timeout.seconds(120);
  @Rule public TestName name = new TestName();

  private static CurvineCluster cluster;
  private FileSystem fs;
  private Path base;

  @BeforeClass
  public static void startCluster() throws IOException {
    cluster = CurvineCluster.get();
  }

  @Before
  public void setUp() throws IOException {
    fs = FileSystem.newInstance(cluster.uri(), cluster.conf());
    base = new Path("/jni-tests/" + name.getMethodName());
    fs.delete(base, true);
    assertTrue(fs.mkdirs(base));
  }

  @After
  public void tearDown() throws IOException {
    if (fs != null) {
      fs.delete(base, true);
      fs.close();
    }
  }

  static byte[] data(int len, long seed) {
    byte[] b = new byte[len];
    new Random(seed).nextBytes(b);
    return b;
  }

  private void write(Path p, byte[] content) throws IOException {
    try (FSDataOutputStream out = fs.create(p, true)) {
      out.write(content);
    }
  }

  private byte[] readAll(Path p) throws IOException {
    FileStatus st = fs.getFileStatus(p);
    byte[] b = new byte[(int) st.getLen()];
    try (FSDataInputStream in = fs.open(p)) {
      in.readFully(b);
      assertEquals(-1, in.read());
    }
    return b;
  }

  @Test
  public void concurrentWritersAndReadersSeeTheirOwnData() throws Exception {
    int threads = 8;
    ExecutorService pool = Executors.newFixedThreadPool(threads);
    try {
      List<Future<?>> fut = new ArrayList<>();
      for (int t = 0; t < threads; t++) {
        final int id = t;
        fut.add(pool.submit(() -> {
          Path p = new Path(base, "f" + id);
          byte[] d = data(3 << 20 | id * 1000, id);
          try (FSDataOutputStream out = fs.create(p, true)) {
            for (int off = 0; off < d.length; off += 100_000) {
              out.write(d, off, Math.min(100_000, d.length - off));
            }
          }
          return null;
        }));
      }
      for (Future<?> f : fut) {
        f.get(60, TimeUnit.SECONDS);
      }
      fut.clear();
      for (int t = 0; t < threads; t++) {
        final int id = t;
        fut.add(pool.submit(() -> {
          Path p = new Path(base, "f" + id);
          byte[] want = data(3 << 20 | id * 1000, id);
          assertArrayEquals(want, readAll(p));
          // direct buffers, in odd-sized pieces
          try (FSDataInputStream in = fs.open(p)) {
            ByteBuffer bb = ByteBuffer.allocateDirect(want.length);
            while (bb.hasRemaining()) {
              ByteBuffer piece = bb.slice();
              piece.limit(Math.min(piece.remaining(), 77_777));
              int n = in.read(piece);
              assertTrue(n > 0);
              bb.position(bb.position() + n);
            }
            bb.flip();
            byte[] got = new byte[want.length];
            bb.get(got);
            assertArrayEquals(want, got);
          }
          return null;
        }));
      }
      for (Future<?> f : fut) {
        f.get(60, TimeUnit.SECONDS);
      }
    } finally {
      pool.shutdownNow();
    }
  }

  @Test
  public void positionedReadsFromManyThreadsOnOneStream() throws Exception {
    Path p = new Path(base, "shared");
    byte[] d = data(2 << 20, 7);
    write(p, d);
    ExecutorService pool = Executors.newFixedThreadPool(6);
    try (FSDataInputStream in = fs.open(p)) {
      List<Future<?>> fut = new ArrayList<>();
      for (int t = 0; t < 6; t++) {
        final long seed = t;
        fut.add(pool.submit(() -> {
          Random r = new Random(seed);
          for (int i = 0; i < 200; i++) {
            int off = r.nextInt(d.length - 10_000);
            int len = 1 + r.nextInt(10_000);
            byte[] b = new byte[len];
            in.readFully(off, b);
            for (int k = 0; k < len; k++) {
              if (b[k] != d[off + k]) {
                throw new AssertionError("mismatch at " + (off + k));
              }
            }
          }
          return null;
        }));
      }
      for (Future<?> f : fut) {
        f.get(60, TimeUnit.SECONDS);
      }
    } finally {
      pool.shutdownNow();
    }
  }

  @Test
  public void largeFileAcrossBlocks() throws IOException {
    Path p = new Path(base, "big");
    long blockSize = 1 << 20;
    byte[] d = data((int) (5.5 * blockSize), 11);
    try (FSDataOutputStream out = fs.create(p, true, 4096, (short) 1, blockSize)) {
      out.write(d);
    }
    FileStatus st = fs.getFileStatus(p);
    assertEquals(d.length, st.getLen());
    assertEquals(blockSize, st.getBlockSize());
    assertArrayEquals(d, readAll(p));
    BlockLocation[] locs = fs.getFileBlockLocations(st, 0, st.getLen());
    assertEquals(6, locs.length);
    for (int i = 0; i < locs.length; i++) {
      assertEquals(i * blockSize, locs[i].getOffset());
      assertEquals("127.0.0.1", locs[i].getHosts()[0]);
    }
    assertEquals(2, fs.getFileBlockLocations(st, blockSize + 10, blockSize).length);
    try (FSDataInputStream in = fs.open(p)) {
      byte[] b = new byte[4096];
      long off = 3 * blockSize - 100; // straddles a block boundary
      in.readFully(off, b);
      for (int k = 0; k < b.length; k++) {
        assertEquals(d[(int) off + k], b[k]);
      }
      in.seek(d.length - 10);
      assertEquals(10, in.read(new byte[100]));
      assertEquals(-1, in.read(new byte[100]));
      try {
        in.readFully(d.length - 5, new byte[10]);
        fail("readFully past EOF");
      } catch (EOFException expected) {
        // ok
      }
      try {
        in.seek(d.length + 1);
        fail("seek past EOF");
      } catch (EOFException expected) {
        // ok
      }
    }
  }

  @Test
  public void closingStreamsTwiceAndUsingThemAfterClose() throws IOException {
    int baseline = NativeFs.openStreams();
    Path p = new Path(base, "twice");
    FSDataOutputStream out = fs.create(p, true);
    out.write(new byte[] {1, 2, 3});
    out.hflush();
    out.close();
    out.close();
    try {
      out.write(4);
      fail("write after close");
    } catch (IOException expected) {
      // ok
    }
    FSDataInputStream in = fs.open(p);
    assertEquals(1, in.read());
    in.close();
    in.close();
    try {
      in.read();
      fail("read after close");
    } catch (IOException expected) {
      // ok
    }
    try {
      in.read(0, new byte[1], 0, 1);
      fail("pread after close");
    } catch (IOException expected) {
      // ok
    }
    assertEquals(baseline, NativeFs.openStreams());
    assertEquals(3, fs.getFileStatus(p).getLen());
  }

  @Test
  public void closedFileSystemThrowsCleanly() throws IOException {
    FileSystem other = FileSystem.newInstance(cluster.uri(), cluster.conf());
    Path p = new Path(base, "x");
    other.mkdirs(p);
    other.close();
    other.close();
    try {
      other.getFileStatus(p);
      fail("stat on a closed file system");
    } catch (IOException e) {
      assertTrue(e.getMessage(), e.getMessage().contains("closed"));
    }
    try {
      other.create(new Path(base, "y"));
      fail("create on a closed file system");
    } catch (IOException expected) {
      // ok
    }
    // other instances are unaffected
    assertTrue(fs.getFileStatus(p).isDirectory());
  }

  @Test
  public void instancesShareOneNativeClient() throws IOException {
    int before = NativeFs.clientCount();
    try (FileSystem a = FileSystem.newInstance(cluster.uri(), cluster.conf());
        FileSystem b = FileSystem.newInstance(cluster.uri(), cluster.conf())) {
      a.mkdirs(new Path(base, "a"));
      assertTrue(b.exists(new Path(base, "a")));
      assertEquals(Math.max(before, 1), NativeFs.clientCount());
    }
  }

  @Test
  public void nonRunningClusterFailsWithinTheTimeout() throws IOException {
    Configuration conf = cluster.conf();
    conf.set("fs.cv.connect_timeout", "1s");
    conf.set("fs.cv.rpc_retries", "1");
    // fs.cv.local_socket stays set: the running master's socket is keyed by its own port,
    // so this client for another port must not reach it
    int port = CurvineCluster.freePort();
    long start = System.nanoTime();
    try {
      FileSystem.newInstance(java.net.URI.create("cv://127.0.0.1:" + port + "/"), conf);
      fail("connected to nothing");
    } catch (IOException e) {
      assertTrue(e.getMessage(), e.getMessage().contains("127.0.0.1:" + port));
    }
    long ms = (System.nanoTime() - start) / 1_000_000;
    assertTrue("took " + ms + " ms", ms < 10_000);
  }

  @Test
  public void badConfigurationValueNamesTheKeyAndUnknownKeysAreIgnored() throws IOException {
    assertEquals(1, NativeFs.checkKey("no_such_key", "1"));
    assertEquals(0, NativeFs.checkKey("read_ahead", "4MB"));
    Configuration conf = cluster.conf();
    conf.set("fs.cv.no_such_key", "1");
    try (FileSystem ok = FileSystem.newInstance(cluster.uri(), conf)) {
      assertTrue(ok.exists(base));
    }
    conf.set("fs.cv.block_size", "12 parsecs");
    try {
      FileSystem.newInstance(cluster.uri(), conf);
      fail("bad value accepted");
    } catch (IOException e) {
      assertTrue(e.getMessage(), e.getMessage().contains("fs.cv.block_size"));
    }
  }

  @Test
  public void nullAndMalformedPathsDoNotCrash() throws IOException {
    try {
      fs.getFileStatus(null);
      fail("null path");
    } catch (IllegalArgumentException | NullPointerException expected) {
      // ok
    }
    try {
      fs.create(new Path(base, "bad\u0000name"));
      fail("NUL in a path");
    } catch (IOException expected) {
      // ok
    }
    try {
      NativeFs.getStatus(-42, "/");
      fail("bogus handle");
    } catch (IOException expected) {
      // ok
    }
    try {
      NativeFs.read(-42, 0, new byte[1], 0, 1);
      fail("bogus reader");
    } catch (IOException expected) {
      // ok
    }
    try {
      NativeFs.getStatus(0, null);
      fail("null path to native");
    } catch (IOException expected) {
      // ok
    }
  }

  @Test
  public void exceptionsHaveHadoopTypes() throws IOException {
    Path f = new Path(base, "file");
    write(f, new byte[] {1});
    try {
      fs.create(f, false);
      fail();
    } catch (FileAlreadyExistsException expected) {
      // ok
    }
    try {
      fs.open(new Path(base, "missing"));
      fail();
    } catch (FileNotFoundException expected) {
      // ok
    }
    try {
      fs.create(new Path(f, "child"));
      fail();
    } catch (ParentNotDirectoryException | FileAlreadyExistsException expected) {
      // ok
    }
    Path d = new Path(base, "dir");
    write(new Path(d, "x"), new byte[] {1});
    try {
      fs.delete(d, false);
      fail();
    } catch (PathIsNotEmptyDirectoryException expected) {
      // ok
    }
    try {
      fs.createNonRecursive(new Path(base, "nodir/x"), FsPermission.getFileDefault(),
          EnumSet.of(CreateFlag.CREATE), 4096, (short) 1, 1 << 20, null);
      fail();
    } catch (FileNotFoundException expected) {
      // ok
    }
  }

  @Test
  public void attributesXattrsTruncateAndAppend() throws IOException {
    Path f = new Path(base, "attrs");
    write(f, "hello world".getBytes(StandardCharsets.UTF_8));
    fs.setPermission(f, new FsPermission((short) 0600));
    assertEquals((short) 0600, fs.getFileStatus(f).getPermission().toShort());
    fs.setTimes(f, 1_000_000L, 2_000_000L);
    FileStatus st = fs.getFileStatus(f);
    assertEquals(1_000_000L, st.getModificationTime());
    assertEquals(2_000_000L, st.getAccessTime());
    fs.setOwner(f, "root", "root");
    assertEquals("root", fs.getFileStatus(f).getOwner());

    fs.setXAttr(f, "user.k", "v1".getBytes(StandardCharsets.UTF_8));
    assertArrayEquals("v1".getBytes(StandardCharsets.UTF_8), fs.getXAttr(f, "user.k"));
    try {
      fs.setXAttr(f, "user.k", new byte[] {1}, EnumSet.of(XAttrSetFlag.CREATE));
      fail("CREATE over an existing xattr");
    } catch (IOException expected) {
      // ok
    }
    assertEquals(List.of("user.k"), fs.listXAttrs(f));
    assertEquals(1, fs.getXAttrs(f).size());
    fs.removeXAttr(f, "user.k");
    assertTrue(fs.listXAttrs(f).isEmpty());

    assertTrue(fs.truncate(f, 5));
    assertArrayEquals("hello".getBytes(StandardCharsets.UTF_8), readAll(f));
    try (FSDataOutputStream out = fs.append(f)) {
      assertEquals(5, out.getPos());
      out.write("!!".getBytes(StandardCharsets.UTF_8));
    }
    assertArrayEquals("hello!!".getBytes(StandardCharsets.UTF_8), readAll(f));
    assertTrue(fs.getContentSummary(base).getLength() >= 7);
    assertTrue(fs.getStatus(base).getCapacity() > 0);
  }

  @Test
  public void statisticsCountBytes() throws IOException {
    FileSystem.Statistics stats = FileSystem.getStatistics("cv", CurvineFileSystem.class);
    long w0 = stats.getBytesWritten();
    long r0 = stats.getBytesRead();
    Path f = new Path(base, "stats");
    write(f, new byte[1000]);
    readAll(f);
    assertTrue(stats.getBytesWritten() - w0 >= 1000);
    assertTrue(stats.getBytesRead() - r0 >= 1000);
  }

  @Test
  public void fileContextThroughAbstractFileSystem() throws IOException {
    FileContext fc = FileContext.getFileContext(cluster.uri(), cluster.conf());
    Path f = new Path(cluster.uri().toString() + base.toUri().getPath().substring(1) + "/fc");
    try (FSDataOutputStream out = fc.create(f, EnumSet.of(CreateFlag.CREATE),
        Options.CreateOpts.createParent())) {
      out.write(new byte[] {9, 8, 7});
    }
    assertEquals(3, fc.getFileStatus(f).getLen());
    assertNotNull(fc.util().listStatus(f.getParent()));
    assertTrue(fc.delete(f, false));
    assertFalse(fc.util().exists(f));
  }

  @Test
  public void renameFollowsHdfsRules() throws IOException {
    Path a = new Path(base, "a");
    Path dir = new Path(base, "dir");
    write(a, new byte[] {1});
    fs.mkdirs(dir);
    assertFalse(fs.rename(new Path(base, "missing"), new Path(base, "z")));
    assertTrue(fs.rename(a, dir));
    assertTrue(fs.exists(new Path(dir, "a")));
    Path b = new Path(base, "b");
    write(b, new byte[] {2});
    assertFalse("rename over an existing file", fs.rename(b, new Path(dir, "a")));
    assertFalse("parent missing", fs.rename(b, new Path(base, "nope/b")));
    assertFalse("into its own subtree", fs.rename(dir, new Path(dir, "sub")));
    assertTrue(fs.rename(dir, new Path(base, "dir2")));
  }

  @Test
  public void hflushAndHsyncPublishToNewReaders() throws IOException {
    Path f = new Path(base, "synced");
    byte[] body = data(3 * 1000 + 17, 5);
    FSDataOutputStream out = fs.create(f);
    assertTrue(out.hasCapability("hflush"));
    assertTrue(out.hasCapability("hsync"));
    int at = 0;
    for (int cut : new int[] {1, 1000, 2500}) {
      out.write(body, at, cut - at);
      at = cut;
      if (cut % 2 == 0) {
        out.hflush();
      } else {
        out.hsync();
      }
      assertEquals("length after sync at " + cut, cut, fs.getFileStatus(f).getLen());
      byte[] seen = readAll(f);
      assertArrayEquals("new reader after sync at " + cut,
          java.util.Arrays.copyOf(body, cut), seen);
    }
    out.write(body, at, body.length - at);
    assertEquals("unsynced bytes stay invisible", at, fs.getFileStatus(f).getLen());
    out.close();
    assertArrayEquals(body, readAll(f));
  }

  @Test
  public void listStatusIteratorPagesThroughALargeDirectory() throws IOException {
    // the test cluster's master pages listings every 7 entries
    Path dir = new Path(base, "many");
    fs.mkdirs(dir);
    java.util.TreeSet<String> want = new java.util.TreeSet<>();
    for (int i = 0; i < 53; i++) {
      String n = String.format("f%03d", i);
      write(new Path(dir, n), new byte[] {(byte) i});
      want.add(n);
    }
    List<String> got = new ArrayList<>();
    org.apache.hadoop.fs.RemoteIterator<FileStatus> it = fs.listStatusIterator(dir);
    while (it.hasNext()) {
      FileStatus st = it.next();
      assertEquals(1, st.getLen());
      got.add(st.getPath().getName());
    }
    assertEquals(new ArrayList<>(want), got);
    assertEquals(53, fs.listStatus(dir).length);
    // a file lists as itself; a missing path is FileNotFoundException
    org.apache.hadoop.fs.RemoteIterator<FileStatus> one =
        fs.listStatusIterator(new Path(dir, "f007"));
    assertTrue(one.hasNext());
    assertEquals("f007", one.next().getPath().getName());
    assertFalse(one.hasNext());
    try {
      fs.listStatusIterator(new Path(base, "missing")).hasNext();
      fail("listing a missing directory");
    } catch (FileNotFoundException expected) {
      // as Hadoop specifies
    }
  }

  @Test
  public void fsShellPutLsCatAndRm() throws Exception {
    java.io.File local = java.io.File.createTempFile("cv-shell", ".txt");
    local.deleteOnExit();
    java.nio.file.Files.write(local.toPath(), "hello from FsShell\n".getBytes(StandardCharsets.UTF_8));
    String dir = cluster.uri().toString() + base.toUri().getPath().substring(1);
    Configuration conf = new Configuration(cluster.conf());
    conf.set("fs.defaultFS", cluster.uri().toString());
    java.io.ByteArrayOutputStream captured = new java.io.ByteArrayOutputStream();
    java.io.PrintStream saved = System.out;
    int put;
    int ls;
    int cat;
    int rm;
    System.setOut(new java.io.PrintStream(captured, true, "UTF-8"));
    try {
      put = org.apache.hadoop.util.ToolRunner.run(conf, new org.apache.hadoop.fs.FsShell(),
          new String[] {"-put", local.getPath(), dir + "/shell.txt"});
      ls = org.apache.hadoop.util.ToolRunner.run(conf, new org.apache.hadoop.fs.FsShell(),
          new String[] {"-ls", dir});
      cat = org.apache.hadoop.util.ToolRunner.run(conf, new org.apache.hadoop.fs.FsShell(),
          new String[] {"-cat", dir + "/shell.txt"});
      rm = org.apache.hadoop.util.ToolRunner.run(conf, new org.apache.hadoop.fs.FsShell(),
          new String[] {"-rm", "-skipTrash", dir + "/shell.txt"});
    } finally {
      System.setOut(saved);
    }
    String out = captured.toString("UTF-8");
    assertEquals(out, 0, put);
    assertEquals(out, 0, ls);
    assertEquals(out, 0, cat);
    assertEquals(out, 0, rm);
    assertTrue(out, out.contains("shell.txt"));
    assertTrue(out, out.contains("hello from FsShell"));
    assertFalse(fs.exists(new Path(base, "shell.txt")));
  }
}
