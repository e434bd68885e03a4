package io.curvine;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.apache.hadoop.HadoopIllegalArgumentException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.BlockLocation;
import org.apache.hadoop.fs.CommonPathCapabilities;
import org.apache.hadoop.fs.CreateFlag;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.FsStatus;
import org.apache.hadoop.fs.ParentNotDirectoryException;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathIsNotEmptyDirectoryException;
import org.apache.hadoop.fs.XAttrSetFlag;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.util.Progressable;

/**
 * Hadoop {@code FileSystem} for {@code cv://host:port/path} (or {@code cv:///path} with
 * the master from {@code fs.cv.master_addrs}) over the Rust client through JNI. All
 * instances for one cluster share one native client and runtime.
 */
public class CurvineFileSystem extends FileSystem {
  public static final String SCHEME = "cv";
  public static final int DEFAULT_PORT = CurvineConfig.DEFAULT_PORT;
  private static final long DEFAULT_BLOCK_SIZE = 128L << 20;

  private URI uri;
  private Path workingDir;
  private long fs;
  private volatile boolean closed = true;
  private int readBufferSize;
  private int writeBufferSize;
  private long defaultBlockSize = DEFAULT_BLOCK_SIZE;
  private short defaultReplication = 1;

  @Override
  public String getScheme() {
    return SCHEME;
  }

  @Override
  protected int getDefaultPort() {
    return DEFAULT_PORT;
  }

  @Override
  public void initialize(URI name, Configuration conf) throws IOException {
    super.initialize(name, conf);
    setConf(conf);
    String authority = name.getAuthority();
    this.uri = URI.create(SCHEME + "://" + (authority == null ? "" : authority) + "/");
    CurvineConfig cc = CurvineConfig.from(conf, name);
    this.fs = connect(cc, UserGroupInformation.getCurrentUser());
    this.closed = false;
    this.readBufferSize = (int) parseSize(conf.get(CurvineConfig.READ_BUFFER_SIZE, "64KB"));
    this.writeBufferSize = (int) parseSize(conf.get(CurvineConfig.WRITE_BUFFER_SIZE, "64KB"));
    String bs = cc.get("block_size");
    if (bs != null) {
      long v = parseSize(bs);
      if (v > 0) {
        defaultBlockSize = v;
      }
    }
    String rep = cc.get("replicas");
    if (rep != null && Integer.parseInt(rep.trim()) > 0) {
      defaultReplication = (short) Integer.parseInt(rep.trim());
    }
    String user = UserGroupInformation.getCurrentUser().getShortUserName();
    this.workingDir = makeQualified(new Path("/user/" + user));
  }

  /**
   * A client acting for {@code ugi}: the process's own uid, gid and groups when it is the
   * user this process runs as; else that user's uid and its groups (resolved by name, or
   * numeric), as HDFS's simple authentication trusts the Hadoop user. The master checks
   * every call against that identity.
   */
  static long connect(CurvineConfig cc, UserGroupInformation ugi) throws IOException {
    String user = ugi.getShortUserName();
    if (user.equals(System.getProperty("user.name"))) {
      return NativeFs.connect(cc.keys, cc.values);
    }
    return NativeFs.connectAs(cc.keys, cc.values, user, ugi.getGroupNames());
  }

  /** Sizes as the cluster TOML writes them: 128MB, 64kb, 1048576. */
  static long parseSize(String s) {
    String t = s.trim().toLowerCase(Locale.ROOT);
    int i = 0;
    while (i < t.length() && (Character.isDigit(t.charAt(i)) || t.charAt(i) == '.')) {
      i++;
    }
    double v = Double.parseDouble(t.substring(0, i));
    String unit = t.substring(i).trim();
    long mult;
    switch (unit) {
      case "":
      case "b":
        mult = 1;
        break;
      case "k":
      case "kb":
      case "kib":
        mult = 1L << 10;
        break;
      case "m":
      case "mb":
      case "mib":
        mult = 1L << 20;
        break;
      case "g":
      case "gb":
      case "gib":
        mult = 1L << 30;
        break;
      case "t":
      case "tb":
      case "tib":
        mult = 1L << 40;
        break;
      default:
        throw new IllegalArgumentException("bad size " + s);
    }
    return (long) (v * mult);
  }

  @Override
  public URI getUri() {
    return uri;
  }

  @Override
  public Path getWorkingDirectory() {
    return workingDir;
  }

  @Override
  public void setWorkingDirectory(Path dir) {
    workingDir = makeQualified(dir);
  }

  @Override
  public long getDefaultBlockSize() {
    return defaultBlockSize;
  }

  @Override
  public short getDefaultReplication() {
    return defaultReplication;
  }

  private void checkOpen() throws IOException {
    if (closed) {
      throw new IOException("Filesystem closed: " + uri);
    }
  }

  /** The Curvine path of {@code p} (qualified against the working directory). */
  private String pathOf(Path p) throws IOException {
    checkOpen();
    if (p == null) {
      throw new IllegalArgumentException("null path");
    }
    String s = makeQualified(p).toUri().getPath();
    if (s == null || s.isEmpty()) {
      return "/";
    }
    return s;
  }

  private FileStatus toStatus(NativeStatus s) {
    Path p = makeQualified(new Path(s.path));
    FsPermission perm = new FsPermission((short) (s.mode & 07777));
    boolean dir = s.isDir();
    return new FileStatus(dir ? 0 : s.len, dir, dir ? 0 : Math.max(1, s.replicas),
        dir ? 0 : s.blockSize, s.mtime, s.atime, perm, s.owner, s.group, p);
  }

  private NativeStatus stat(String path) throws IOException {
    statistics.incrementReadOps(1);
    return NativeFs.getStatus(fs, path);
  }

  // ---------------- reads ----------------

  @Override
  public FSDataInputStream open(Path f, int bufferSize) throws IOException {
    String path = pathOf(f);
    statistics.incrementReadOps(1);
    long h;
    try {
      h = NativeFs.openReader(fs, path);
    } catch (NativeErrors.IsADirectoryException e) {
      throw (FileNotFoundException) new FileNotFoundException(path + ": is a directory")
          .initCause(e);
    }
    try {
      return new FSDataInputStream(
          new CurvineInputStream(h, path, Math.max(bufferSize, readBufferSize), statistics));
    } catch (IOException | RuntimeException e) {
      NativeFs.closeReader(h);
      throw e;
    }
  }

  // ---------------- writes ----------------

  private int mode(FsPermission permission, boolean dir) {
    FsPermission p = permission != null ? permission
        : (dir ? FsPermission.getDirDefault() : FsPermission.getFileDefault());
    return p.applyUMask(FsPermission.getUMask(getConf())).toShort() & 07777;
  }

  private FSDataOutputStream create(Path f, FsPermission permission, boolean overwrite,
      int bufferSize, short replication, long blockSize, boolean createParents)
      throws IOException {
    String path = pathOf(f);
    statistics.incrementWriteOps(1);
    if (!createParents) {
      Path parent = makeQualified(f).getParent();
      if (parent != null) {
        NativeStatus ps = stat(pathOf(parent));
        if (ps == null) {
          throw new FileNotFoundException("parent directory of " + path + " does not exist");
        }
        if (!ps.isDir()) {
          throw new ParentNotDirectoryException(pathOf(parent) + " is not a directory");
        }
      }
    }
    long h;
    try {
      h = NativeFs.create(fs, path, overwrite, mode(permission, false), replication,
          blockSize, createParents);
    } catch (NativeErrors.IsADirectoryException e) {
      throw (FileAlreadyExistsException) new FileAlreadyExistsException(
          path + " is a directory").initCause(e);
    }
    CurvineOutputStream out = new CurvineOutputStream(h, path,
        Math.max(bufferSize, writeBufferSize), statistics);
    return new FSDataOutputStream(out, statistics);
  }

  @Override
  public FSDataOutputStream create(Path f, FsPermission permission, boolean overwrite,
      int bufferSize, short replication, long blockSize, Progressable progress)
      throws IOException {
    return create(f, permission, overwrite, bufferSize, replication, blockSize, true);
  }

  @Override
  public FSDataOutputStream createNonRecursive(Path f, FsPermission permission,
      EnumSet<CreateFlag> flags, int bufferSize, short replication, long blockSize,
      Progressable progress) throws IOException {
    if (flags.contains(CreateFlag.APPEND)) {
      throw new UnsupportedOperationException("createNonRecursive with APPEND");
    }
    return create(f, permission, flags.contains(CreateFlag.OVERWRITE), bufferSize,
        replication, blockSize, false);
  }

  @Override
  public FSDataOutputStream append(Path f, int bufferSize, Progressable progress)
      throws IOException {
    String path = pathOf(f);
    statistics.incrementWriteOps(1);
    long h;
    try {
      h = NativeFs.append(fs, path);
    } catch (NativeErrors.IsADirectoryException e) {
      throw (FileAlreadyExistsException) new FileAlreadyExistsException(
          path + " is a directory").initCause(e);
    }
    CurvineOutputStream out = new CurvineOutputStream(h, path,
        Math.max(bufferSize, writeBufferSize), statistics);
    long start;
    try {
      start = out.startPosition();
    } catch (IOException e) {
      out.close();
      throw e;
    }
    return new FSDataOutputStream(out, statistics, start);
  }

  @Override
  public boolean truncate(Path f, long newLength) throws IOException {
    String path = pathOf(f);
    NativeStatus st = stat(path);
    if (st == null) {
      throw new FileNotFoundException(path);
    }
    if (st.isDir()) {
      throw new FileNotFoundException(path + ": is a directory");
    }
    if (newLength < 0 || newLength > st.len) {
      throw new HadoopIllegalArgumentException("cannot truncate " + path + " of length "
          + st.len + " to " + newLength);
    }
    statistics.incrementWriteOps(1);
    NativeFs.truncate(fs, path, newLength);
    return true;
  }

  // ---------------- namespace ----------------

  @Override
  public boolean rename(Path src, Path dst) throws IOException {
    String s = pathOf(src);
    String d = pathOf(dst);
    statistics.incrementWriteOps(1);
    if (s.equals("/")) {
      return false;
    }
    NativeStatus ss = stat(s);
    if (ss == null) {
      return false;
    }
    NativeStatus ds = stat(d);
    if (ds != null && ds.isDir()) {
      if (s.equals(d)) {
        return false;
      }
      d = (d.endsWith("/") ? d : d + "/") + new Path(s).getName();
      ds = stat(d);
    }
    if (s.equals(d)) {
      // renaming a file onto itself succeeds (HDFS); a directory into itself does not
      return !ss.isDir();
    }
    if (ds != null) {
      return false;
    }
    if (ss.isDir() && d.startsWith(s + "/")) {
      return false;
    }
    Path parent = new Path(d).getParent();
    if (parent != null) {
      NativeStatus ps = stat(parent.toUri().getPath());
      if (ps == null || !ps.isDir()) {
        return false;
      }
    }
    try {
      NativeFs.rename(fs, s, d, NativeFs.RENAME_NOREPLACE);
      return true;
    } catch (FileNotFoundException | FileAlreadyExistsException e) {
      return false;
    }
  }

  @Override
  public boolean delete(Path f, boolean recursive) throws IOException {
    String path = pathOf(f);
    statistics.incrementWriteOps(1);
    if (path.equals("/")) {
      return deleteRoot(recursive);
    }
    try {
      NativeFs.delete(fs, path, recursive);
      return true;
    } catch (FileNotFoundException e) {
      return false;
    }
  }

  /** "/" itself stays; a recursive delete empties it. */
  private boolean deleteRoot(boolean recursive) throws IOException {
    NativeStatus[] children = NativeFs.list(fs, "/");
    if (children.length == 0) {
      return true;
    }
    if (!recursive) {
      throw new PathIsNotEmptyDirectoryException("/");
    }
    for (NativeStatus c : children) {
      try {
        NativeFs.delete(fs, c.path, true);
      } catch (FileNotFoundException e) {
        // deleted concurrently
      }
    }
    return true;
  }

  @Override
  public FileStatus[] listStatus(Path f) throws IOException {
    String path = pathOf(f);
    statistics.incrementReadOps(1);
    NativeStatus[] list;
    try {
      list = NativeFs.list(fs, path);
    } catch (ParentNotDirectoryException e) {
      NativeStatus st = stat(path);
      if (st != null && !st.isDir()) {
        return new FileStatus[] {toStatus(st)};
      }
      throw e;
    }
    if (list.length == 0) {
      // an empty directory, or a file (whose listing is itself)
      NativeStatus st = stat(path);
      if (st == null) {
        throw new FileNotFoundException(path);
      }
      if (!st.isDir()) {
        return new FileStatus[] {toStatus(st)};
      }
    }
    FileStatus[] out = new FileStatus[list.length];
    for (int i = 0; i < list.length; i++) {
      out[i] = toStatus(list[i]);
    }
    return out;
  }

  /**
   * One page of a directory listing, for {@link #listStatusIterator(Path)}: the master
   * returns up to its page size ({@code master.list_page_size}) per call, so a huge
   * directory is never held in memory at once. The token is the last name returned.
   */
  @Override
  protected DirectoryEntries listStatusBatch(Path f, byte[] token) throws IOException {
    String path = pathOf(f);
    statistics.incrementReadOps(1);
    String after = token == null ? "" : new String(token, StandardCharsets.UTF_8);
    boolean[] more = new boolean[1];
    NativeStatus[] page;
    try {
      page = NativeFs.listPage(fs, path, after, 0, more);
    } catch (ParentNotDirectoryException e) {
      NativeStatus st = stat(path);
      if (st != null && !st.isDir()) {
        return new DirectoryEntries(new FileStatus[] {toStatus(st)}, null, false);
      }
      throw e;
    }
    FileStatus[] out = new FileStatus[page.length];
    for (int i = 0; i < page.length; i++) {
      out[i] = toStatus(page[i]);
    }
    if (!more[0] || page.length == 0) {
      return new DirectoryEntries(out, null, false);
    }
    String last = page[page.length - 1].path;
    byte[] next = last.substring(last.lastIndexOf('/') + 1).getBytes(StandardCharsets.UTF_8);
    return new DirectoryEntries(out, next, true);
  }

  @Override
  public boolean mkdirs(Path f, FsPermission permission) throws IOException {
    String path = pathOf(f);
    statistics.incrementWriteOps(1);
    NativeStatus st = stat(path);
    if (st != null) {
      if (st.isDir()) {
        return true;
      }
      throw new FileAlreadyExistsException(path + " exists and is not a directory");
    }
    try {
      NativeFs.mkdirs(fs, path, mode(permission, true));
    } catch (FileAlreadyExistsException e) {
      NativeStatus again = stat(path);
      if (again == null || !again.isDir()) {
        throw e;
      }
    }
    return true;
  }

  @Override
  public FileStatus getFileStatus(Path f) throws IOException {
    String path = pathOf(f);
    NativeStatus st = stat(path);
    if (st == null) {
      throw new FileNotFoundException("File does not exist: " + makeQualified(f));
    }
    return toStatus(st);
  }

  // ---------------- attributes ----------------

  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    String path = pathOf(p);
    statistics.incrementWriteOps(1);
    NativeFs.setAttr(fs, path, permission.toShort() & 07777, null, null, -1, -1, -1);
  }

  @Override
  public void setOwner(Path p, String username, String groupname) throws IOException {
    String path = pathOf(p);
    if (username == null && groupname == null) {
      return;
    }
    statistics.incrementWriteOps(1);
    NativeFs.setAttr(fs, path, -1, username, groupname, -1, -1, -1);
  }

  @Override
  public void setTimes(Path p, long mtime, long atime) throws IOException {
    String path = pathOf(p);
    statistics.incrementWriteOps(1);
    NativeFs.setAttr(fs, path, -1, null, null, mtime, atime, -1);
  }

  @Override
  public boolean setReplication(Path src, short replication) throws IOException {
    String path = pathOf(src);
    NativeStatus st = stat(path);
    if (st == null || st.isDir()) {
      return false;
    }
    statistics.incrementWriteOps(1);
    NativeFs.setAttr(fs, path, -1, null, null, -1, -1, replication);
    return true;
  }

  @Override
  public BlockLocation[] getFileBlockLocations(FileStatus file, long start, long len)
      throws IOException {
    if (file == null) {
      return null;
    }
    if (start < 0 || len < 0) {
      throw new IllegalArgumentException("invalid start or len: " + start + ", " + len);
    }
    if (file.isDirectory() || file.getLen() <= start || len == 0) {
      return new BlockLocation[0];
    }
    String path = pathOf(file.getPath());
    statistics.incrementReadOps(1);
    String[] blocks = NativeFs.blockLocations(fs, path, start, len);
    List<BlockLocation> out = new ArrayList<>(blocks.length);
    for (String b : blocks) {
      String[] parts = b.split(",", 3);
      long off = Long.parseLong(parts[0]);
      long blen = Long.parseLong(parts[1]);
      String[] names = parts[2].isEmpty() ? new String[0] : parts[2].split(";");
      String[] hosts = new String[names.length];
      for (int i = 0; i < names.length; i++) {
        int colon = names[i].lastIndexOf(':');
        hosts[i] = colon > 0 ? names[i].substring(0, colon) : names[i];
      }
      out.add(new BlockLocation(names, hosts, off, blen));
    }
    return out.toArray(new BlockLocation[0]);
  }

  @Override
  public FsStatus getStatus(Path p) throws IOException {
    checkOpen();
    long[] r = NativeFs.report(fs);
    return new FsStatus(r[0], r[1], Math.max(0, r[0] - r[1]));
  }

  // ---------------- xattrs ----------------

  private static int xattrFlags(EnumSet<XAttrSetFlag> flag) {
    boolean create = flag.contains(XAttrSetFlag.CREATE);
    boolean replace = flag.contains(XAttrSetFlag.REPLACE);
    if (create && !replace) {
      return NativeFs.XATTR_CREATE;
    }
    if (replace && !create) {
      return NativeFs.XATTR_REPLACE;
    }
    return 0;
  }

  @Override
  public void setXAttr(Path path, String name, byte[] value, EnumSet<XAttrSetFlag> flag)
      throws IOException {
    String p = pathOf(path);
    statistics.incrementWriteOps(1);
    NativeFs.setXattr(fs, p, name, value, xattrFlags(flag));
  }

  @Override
  public byte[] getXAttr(Path path, String name) throws IOException {
    String p = pathOf(path);
    statistics.incrementReadOps(1);
    byte[] v = NativeFs.getXattr(fs, p, name);
    if (v == null) {
      throw new IOException("At least one of the attributes provided was not found: " + name
          + " on " + p);
    }
    return v;
  }

  @Override
  public Map<String, byte[]> getXAttrs(Path path) throws IOException {
    String p = pathOf(path);
    Map<String, byte[]> out = new HashMap<>();
    for (String name : NativeFs.listXattrs(fs, p)) {
      byte[] v = NativeFs.getXattr(fs, p, name);
      if (v != null) {
        out.put(name, v);
      }
    }
    return out;
  }

  @Override
  public Map<String, byte[]> getXAttrs(Path path, List<String> names) throws IOException {
    String p = pathOf(path);
    Map<String, byte[]> out = new HashMap<>();
    for (String name : names) {
      byte[] v = NativeFs.getXattr(fs, p, name);
      if (v == null) {
        throw new IOException("At least one of the attributes provided was not found: "
            + name + " on " + p);
      }
      out.put(name, v);
    }
    return out;
  }

  @Override
  public List<String> listXAttrs(Path path) throws IOException {
    String p = pathOf(path);
    statistics.incrementReadOps(1);
    return List.of(NativeFs.listXattrs(fs, p));
  }

  @Override
  public void removeXAttr(Path path, String name) throws IOException {
    String p = pathOf(path);
    statistics.incrementWriteOps(1);
    NativeFs.removeXattr(fs, p, name);
  }

  // ---------------- misc ----------------

  @Override
  public boolean hasPathCapability(Path path, String capability) throws IOException {
    switch (org.apache.hadoop.fs.impl.PathCapabilitiesSupport.validatePathCapabilityArgs(makeQualified(path), capability)) {
      case CommonPathCapabilities.FS_APPEND:
      case CommonPathCapabilities.FS_TRUNCATE:
      case CommonPathCapabilities.FS_PERMISSIONS:
      case CommonPathCapabilities.FS_XATTRS:
        return true;
      default:
        return super.hasPathCapability(path, capability);
    }
  }

  @Override
  public String getCanonicalServiceName() {
    return null;
  }

  @Override
  public void close() throws IOException {
    if (closed) {
      return;
    }
    try {
      super.close();
    } finally {
      closed = true;
      NativeFs.disconnect(fs);
    }
  }

  @Override
  public String toString() {
    return "CurvineFileSystem{" + uri + "}";
  }
}
