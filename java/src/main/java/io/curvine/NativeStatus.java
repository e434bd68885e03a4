package io.curvine;

/** A file status as the native layer returns it (built by JNI; see status.rs). */
final class NativeStatus {
  static final int TYPE_FILE = 1;
  static final int TYPE_DIR = 2;
  static final int TYPE_SYMLINK = 3;

  final String path;
  final int type;
  final long len;
  final int mode;
  final long mtime;
  final long atime;
  final long blockSize;
  final int replicas;
  final String owner;
  final String group;
  final String symlink;
  final int children;

  NativeStatus(String path, int type, long len, int mode, long mtime, long atime,
      long blockSize, int replicas, String owner, String group, String symlink, int children) {
    this.path = path;
    this.type = type;
    this.len = len;
    this.mode = mode;
    this.mtime = mtime;
    this.atime = atime;
    this.blockSize = blockSize;
    this.replicas = replicas;
    this.owner = owner;
    this.group = group;
    this.symlink = symlink;
    this.children = children;
  }

  boolean isDir() {
    return type == TYPE_DIR;
  }
}
