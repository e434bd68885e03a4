package io.curvine;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.security.PrivilegedExceptionAction;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.security.AccessControlException;
import org.apache.hadoop.security.UserGroupInformation;
import org.junit.After;
import org.junit.Before;
import org.junit.BeforeClass;
import org.junit.Rule;
import org.junit.Test;
import org.junit.rules.TestName;
import org.junit.rules.Timeout;

/**
 * The master's permission rules through the Hadoop API: a {@code FileSystem} made inside
 * {@code UserGroupInformation.doAs} acts as that user, and what the master refuses comes
 * back as {@link AccessControlException} with nothing changed. The process (root) sets
 * up each case; users A (uid 5001, groups 5001 and 7001) and B (uid 5002) act.
 */
public class TestPermissions {
  @Rule public Timeout timeout = Timeout.seconds(120);
  @Rule public TestName name = new TestName();

  private static final String A = "5001";
  private static final String GA = "7001";
  private static final String B = "5002";

  private static CurvineCluster cluster;
  private FileSystem root;
  private FileSystem a;
  private FileSystem b;
  private Path base;

  @BeforeClass
  public static void startCluster() throws IOException {
    cluster = CurvineCluster.get();
  }

  private static FileSystem as(String user, String... groups) throws Exception {
    UserGroupInformation ugi = UserGroupInformation.createUserForTesting(user, groups);
    return ugi.doAs((PrivilegedExceptionAction<FileSystem>)
        () -> FileSystem.newInstance(cluster.uri(), cluster.conf()));
  }

  @Before
  public void setUp() throws Exception {
    root = FileSystem.newInstance(cluster.uri(), cluster.conf());
    a = as(A, A, GA);
    b = as(B, B);
    base = new Path("/permission-tests/" + name.getMethodName());
    root.delete(base, true);
    assertTrue(root.mkdirs(base));
    root.setPermission(base, new FsPermission((short) 0777));
  }

  @After
  public void tearDown() throws IOException {
    for (FileSystem fs : new FileSystem[] {a, b}) {
      if (fs != null) {
        fs.close();
      }
    }
    if (root != null) {
      root.delete(base, true);
      root.close();
    }
  }

  private void write(FileSystem fs, Path p, String text) throws IOException {
    try (FSDataOutputStream out = fs.create(p, true)) {
      out.write(text.getBytes(StandardCharsets.UTF_8));
    }
  }

  private String read(FileSystem fs, Path p) throws IOException {
    FileStatus st = fs.getFileStatus(p);
    byte[] buf = new byte[(int) st.getLen()];
    try (FSDataInputStream in = fs.open(p)) {
      in.readFully(0, buf);
    }
    return new String(buf, StandardCharsets.UTF_8);
  }

  private interface Call {
    void run() throws IOException;
  }

  private static void refused(String what, Call c) throws IOException {
    try {
      c.run();
      fail(what + ": not refused");
    } catch (AccessControlException e) {
      // expected
    }
  }

  @Test
  public void theCallersIdentityReachesTheMaster() throws Exception {
    Path f = new Path(base, "mine");
    write(a, f, "a");
    FileStatus st = root.getFileStatus(f);
    assertEquals(A, st.getOwner());
    assertEquals(A, st.getGroup());
  }

  @Test
  public void openCreateAndDeleteNeedTheirModeBits() throws Exception {
    Path secret = new Path(base, "secret");
    write(root, secret, "root only");
    root.setPermission(secret, new FsPermission((short) 0600));
    refused("open by another user", () -> b.open(secret).close());
    refused("overwrite by another user", () -> b.create(secret, true).close());
    refused("append by another user", () -> b.append(secret).close());

    Path closed = new Path(base, "closed");
    root.mkdirs(closed);
    root.setPermission(closed, new FsPermission((short) 0755));
    write(root, new Path(closed, "f"), "kept");
    refused("create in a directory without write", () -> a.create(new Path(closed, "g")).close());
    refused("mkdir in it", () -> a.mkdirs(new Path(closed, "d")));
    refused("delete from it", () -> a.delete(new Path(closed, "f"), false));
    refused("delete it recursively", () -> a.delete(closed, true));
    assertEquals("kept", read(root, new Path(closed, "f")));
    assertEquals(1, root.listStatus(closed).length);
    assertEquals("root only", read(root, secret));

    // group access counts through a supplementary group
    root.setOwner(secret, null, GA);
    root.setPermission(secret, new FsPermission((short) 0040));
    assertEquals("root only", read(a, secret));
    refused("read by a non-member", () -> b.open(secret).close());
    refused("write by a member without group write", () -> a.create(secret, true).close());
  }

  @Test
  public void stickyDirectoriesKeepOtherUsersEntries() throws Exception {
    Path t = new Path(base, "t");
    root.mkdirs(t);
    root.setPermission(t, new FsPermission((short) 01777));
    assertTrue(root.getFileStatus(t).getPermission().getStickyBit());
    Path af = new Path(t, "a");
    Path ad = new Path(t, "ad");
    write(a, af, "A's");
    assertTrue(a.mkdirs(ad));
    Path bf = new Path(t, "b");
    write(b, bf, "B's");
    refused("delete of A's file", () -> b.delete(af, false));
    refused("delete of A's directory", () -> b.delete(ad, true));
    refused("rename of A's file", () -> b.rename(af, new Path(t, "x")));
    // Hadoop's rename never replaces a file: false, before the sticky rule matters
    assertFalse(b.rename(bf, af));
    refused("rename out of the directory", () -> b.rename(af, new Path(base, "x")));
    assertEquals("A's", read(root, af));
    assertTrue(root.getFileStatus(ad).isDirectory());
    assertFalse(root.exists(new Path(t, "x")));
    assertFalse(root.exists(new Path(base, "x")));
    assertEquals("B's", read(root, bf));
    // the entry's owner and root may
    assertTrue(b.rename(bf, new Path(t, "b2")));
    assertTrue(a.delete(af, false));
    assertTrue(root.delete(ad, true));
  }

  @Test
  public void onlyRootChangesAnOwnerAndOwnersAGroupTheyAreIn() throws Exception {
    Path f = new Path(base, "f");
    write(a, f, "x");
    refused("give the file away", () -> a.setOwner(f, B, null));
    refused("take it", () -> b.setOwner(f, B, null));
    refused("chgrp by another user", () -> b.setOwner(f, null, B));
    refused("chgrp to a group A is not in", () -> a.setOwner(f, null, "7002"));
    FileStatus st = root.getFileStatus(f);
    assertArrayEquals(new String[] {A, A}, new String[] {st.getOwner(), st.getGroup()});
    a.setOwner(f, null, GA);
    assertEquals(GA, root.getFileStatus(f).getGroup());
    root.setOwner(f, B, B);
    st = root.getFileStatus(f);
    assertArrayEquals(new String[] {B, B}, new String[] {st.getOwner(), st.getGroup()});
  }

  @Test
  public void onlyTheOwnerChangesPermissions() throws Exception {
    Path f = new Path(base, "f");
    write(a, f, "x");
    a.setPermission(f, new FsPermission((short) 0644));
    refused("chmod by another user", () -> b.setPermission(f, new FsPermission((short) 0777)));
    assertEquals((short) 0644, root.getFileStatus(f).getPermission().toShort());
    a.setPermission(f, new FsPermission((short) 0600));
    assertEquals((short) 0600, root.getFileStatus(f).getPermission().toShort());
    root.setPermission(f, new FsPermission((short) 0640));
    assertEquals((short) 0640, root.getFileStatus(f).getPermission().toShort());
  }
}
