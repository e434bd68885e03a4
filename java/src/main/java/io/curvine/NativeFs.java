package io.curvine;

import java.io.IOException;
import java.nio.ByteBuffer;

/**
 * The JNI surface of libcurvine_jni. Handles are ids into native tables, never
 * pointers: a closed or unknown handle throws IOException. Every failure arrives as an
 * exception built by {@link NativeErrors}.
 */
final class NativeFs {
  static {
    NativeLoader.load();
  }

  private NativeFs() {}

  /** rename flag: fail with FileAlreadyExistsException if the destination exists. */
  static final int RENAME_NOREPLACE = 1;
  /** xattr flags (as setxattr(2)): must not exist / must exist; 0 = either. */
  static final int XATTR_CREATE = 1;
  static final int XATTR_REPLACE = 2;

  static native int checkKey(String key, String value) throws IOException;
  static native long connect(String[] keys, String[] values) throws IOException;
  /** As {@link #connect}, acting as {@code user} (a name or uid) in {@code groups}. */
  static native long connectAs(String[] keys, String[] values, String user, String[] groups)
      throws IOException;
  static native void disconnect(long fs);
  static native int clientCount();
  static native int openStreams();

  static native void mkdirs(long fs, String path, int mode) throws IOException;
  static native NativeStatus getStatus(long fs, String path) throws IOException;
  static native NativeStatus[] list(long fs, String path) throws IOException;
  /** One page of entries after {@code startAfter}; {@code more[0]} tells if more follow. */
  static native NativeStatus[] listPage(long fs, String path, String startAfter, int limit,
      boolean[] more) throws IOException;
  static native void rename(long fs, String src, String dst, int flags) throws IOException;
  static native void delete(long fs, String path, boolean recursive) throws IOException;
  static native void setAttr(long fs, String path, int mode, String owner, String group,
      long mtime, long atime, int replicas) throws IOException;
  static native void truncate(long fs, String path, long len) throws IOException;
  static native void setXattr(long fs, String path, String name, byte[] value, int flags)
      throws IOException;
  static native byte[] getXattr(long fs, String path, String name) throws IOException;
  static native String[] listXattrs(long fs, String path) throws IOException;
  static native void removeXattr(long fs, String path, String name) throws IOException;
  static native String[] blockLocations(long fs, String path, long start, long len)
      throws IOException;
  static native long[] report(long fs) throws IOException;

  static native long openReader(long fs, String path) throws IOException;
  static native long readerLength(long reader) throws IOException;
  static native int read(long reader, long pos, byte[] b, int off, int len) throws IOException;
  static native int readDirect(long reader, long pos, ByteBuffer buf, int off, int len)
      throws IOException;
  static native void closeReader(long reader);

  static native long create(long fs, String path, boolean overwrite, int mode, int replicas,
      long blockSize, boolean createParents) throws IOException;
  static native long append(long fs, String path) throws IOException;
  static native long writerPos(long writer) throws IOException;
  static native void write(long writer, byte[] b, int off, int len) throws IOException;
  static native void writeDirect(long writer, ByteBuffer buf, int off, int len)
      throws IOException;
  static native void sync(long writer) throws IOException;
  static native void closeWriter(long writer) throws IOException;
}
