package io.curvine;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.Locale;
import java.util.function.IntFunction;
import org.apache.hadoop.fs.ByteBufferPositionedReadable;
import org.apache.hadoop.fs.ByteBufferReadable;
import org.apache.hadoop.fs.FSExceptionMessages;
import org.apache.hadoop.fs.FSInputStream;
import org.apache.hadoop.fs.FileRange;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.StreamCapabilities;

/**
 * A file opened for reading. The position lives here; every native read is positional,
 * so seeks cost nothing. Small reads go through a heap buffer; reads at least half its
 * size, and all reads into direct ByteBuffers, go straight to the native reader.
 * Positioned reads may run from several threads (the native reader serialises them).
 */
public class CurvineInputStream extends FSInputStream
    implements ByteBufferReadable, ByteBufferPositionedReadable, StreamCapabilities {
  private final long handle;
  private final long length;
  private final String path;
  private final FileSystem.Statistics stats;
  private final byte[] buf;
  private long bufStart;
  private int bufLen;
  private long pos;
  private volatile boolean closed;

  CurvineInputStream(long handle, String path, int bufferSize, FileSystem.Statistics stats)
      throws IOException {
    this.handle = handle;
    this.path = path;
    this.stats = stats;
    this.length = NativeFs.readerLength(handle);
    this.buf = new byte[Math.max(bufferSize, 4096)];
  }

  private void checkOpen() throws IOException {
    if (closed) {
      throw new IOException(FSExceptionMessages.STREAM_IS_CLOSED + ": " + path);
    }
  }

  /** The file's length when it was opened. */
  public long length() {
    return length;
  }

  @Override
  public synchronized void seek(long target) throws IOException {
    checkOpen();
    if (target < 0) {
      throw new EOFException(FSExceptionMessages.NEGATIVE_SEEK + " " + target + ": " + path);
    }
    if (target > length) {
      throw new EOFException(
          FSExceptionMessages.CANNOT_SEEK_PAST_EOF + " " + target + " > " + length + ": " + path);
    }
    pos = target;
  }

  @Override
  public synchronized long getPos() throws IOException {
    checkOpen();
    return pos;
  }

  @Override
  public boolean seekToNewSource(long targetPos) {
    return false;
  }

  @Override
  public synchronized int available() throws IOException {
    checkOpen();
    return (int) Math.min(Integer.MAX_VALUE, length - pos);
  }

  private void count(int n) {
    if (n > 0 && stats != null) {
      stats.incrementBytesRead(n);
    }
  }

  /** Bytes of the buffer available at {@code pos} (0 if the buffer does not cover it). */
  private int buffered() {
    if (pos >= bufStart && pos < bufStart + bufLen) {
      return (int) (bufStart + bufLen - pos);
    }
    return 0;
  }

  @Override
  public synchronized int read() throws IOException {
    checkOpen();
    if (pos >= length) {
      return -1;
    }
    if (buffered() == 0 && !fill()) {
      return -1;
    }
    int b = buf[(int) (pos - bufStart)] & 0xff;
    pos++;
    count(1);
    return b;
  }

  private boolean fill() throws IOException {
    int n = NativeFs.read(handle, pos, buf, 0, buf.length);
    if (n <= 0) {
      bufLen = 0;
      return false;
    }
    bufStart = pos;
    bufLen = n;
    return true;
  }

  @Override
  public synchronized int read(byte[] b, int off, int len) throws IOException {
    checkOpen();
    validate(b, off, len);
    if (len == 0) {
      return 0;
    }
    if (pos >= length) {
      return -1;
    }
    int avail = buffered();
    if (avail > 0) {
      int n = Math.min(avail, len);
      System.arraycopy(buf, (int) (pos - bufStart), b, off, n);
      pos += n;
      count(n);
      return n;
    }
    if (len >= buf.length / 2) {
      int n = NativeFs.read(handle, pos, b, off, len);
      if (n > 0) {
        pos += n;
        count(n);
      }
      return n;
    }
    if (!fill()) {
      return -1;
    }
    int n = Math.min(bufLen, len);
    System.arraycopy(buf, 0, b, off, n);
    pos += n;
    count(n);
    return n;
  }

  private static void validate(byte[] b, int off, int len) {
    if (b == null) {
      throw new NullPointerException("null buffer");
    }
    if (off < 0 || len < 0 || len > b.length - off) {
      throw new IndexOutOfBoundsException(
          String.format(Locale.ROOT, "off=%d len=%d buffer=%d", off, len, b.length));
    }
  }

  @Override
  public synchronized int read(ByteBuffer dst) throws IOException {
    checkOpen();
    int want = dst.remaining();
    if (want == 0) {
      return 0;
    }
    if (pos >= length) {
      return -1;
    }
    int avail = buffered();
    int n;
    if (avail > 0) {
      n = Math.min(avail, want);
      dst.put(buf, (int) (pos - bufStart), n);
    } else {
      n = readAt(pos, dst);
      if (n <= 0) {
        return -1;
      }
    }
    pos += n;
    count(n);
    return n;
  }

  /** One native read at {@code position} into {@code dst}; advances dst's position. */
  private int readAt(long position, ByteBuffer dst) throws IOException {
    int want = dst.remaining();
    int n;
    if (dst.isDirect()) {
      n = NativeFs.readDirect(handle, position, dst, dst.position(), want);
    } else if (dst.hasArray()) {
      n = NativeFs.read(handle, position, dst.array(), dst.arrayOffset() + dst.position(), want);
    } else {
      byte[] tmp = new byte[Math.min(want, 1 << 20)];
      n = NativeFs.read(handle, position, tmp, 0, tmp.length);
      if (n > 0) {
        dst.put(tmp, 0, n);
        return n;
      }
      return n;
    }
    if (n > 0) {
      dst.position(dst.position() + n);
    }
    return n;
  }

  // ---------- PositionedReadable (does not move the stream position) ----------

  private void checkPositioned(long position) throws IOException {
    checkOpen();
    if (position < 0) {
      throw new EOFException(FSExceptionMessages.NEGATIVE_SEEK + " " + position + ": " + path);
    }
  }

  @Override
  public int read(long position, byte[] b, int off, int len) throws IOException {
    validatePositionedReadArgs(position, b, off, len);
    validate(b, off, len);
    checkPositioned(position);
    if (len == 0) {
      return 0;
    }
    if (position >= length) {
      return -1;
    }
    int n = NativeFs.read(handle, position, b, off, len);
    count(n);
    return n;
  }

  @Override
  public void readFully(long position, byte[] b, int off, int len) throws IOException {
    validatePositionedReadArgs(position, b, off, len);
    validate(b, off, len);
    checkPositioned(position);
    if (position + len > length) {
      throw new EOFException(FSExceptionMessages.EOF_IN_READ_FULLY + ": " + len
          + " bytes at " + position + " of " + length + ": " + path);
    }
    int done = 0;
    while (done < len) {
      int n = NativeFs.read(handle, position + done, b, off + done, len - done);
      if (n <= 0) {
        throw new EOFException(FSExceptionMessages.EOF_IN_READ_FULLY + ": " + path);
      }
      count(n);
      done += n;
    }
  }

  @Override
  public int read(long position, ByteBuffer dst) throws IOException {
    checkPositioned(position);
    if (!dst.hasRemaining()) {
      return 0;
    }
    if (position >= length) {
      return -1;
    }
    int n = readAt(position, dst);
    count(n);
    return n;
  }

  @Override
  public void readFully(long position, ByteBuffer dst) throws IOException {
    checkPositioned(position);
    if (position + dst.remaining() > length) {
      throw new EOFException(FSExceptionMessages.EOF_IN_READ_FULLY + ": " + dst.remaining()
          + " bytes at " + position + " of " + length + ": " + path);
    }
    long at = position;
    while (dst.hasRemaining()) {
      int n = readAt(at, dst);
      if (n <= 0) {
        throw new EOFException(FSExceptionMessages.EOF_IN_READ_FULLY + ": " + path);
      }
      count(n);
      at += n;
    }
  }

  /** Checks every range up front (a negative offset is an EOFException), then reads. */
  @Override
  public void readVectored(List<? extends FileRange> ranges,
      IntFunction<ByteBuffer> allocate) throws IOException {
    checkOpen();
    for (FileRange r : ranges) {
      if (r.getLength() < 0) {
        throw new IllegalArgumentException("negative length in range " + r);
      }
      if (r.getOffset() < 0) {
        throw new EOFException(FSExceptionMessages.NEGATIVE_SEEK + " in range " + r);
      }
    }
    super.readVectored(ranges, allocate);
  }

  @Override
  public boolean hasCapability(String capability) {
    switch (capability.toLowerCase(Locale.ROOT)) {
      case StreamCapabilities.READBYTEBUFFER:
      case StreamCapabilities.PREADBYTEBUFFER:
      case StreamCapabilities.VECTOREDIO:
        return true;
      default:
        return false;
    }
  }

  @Override
  public void close() {
    if (closed) {
      return;
    }
    synchronized (this) {
      if (closed) {
        return;
      }
      closed = true;
      NativeFs.closeReader(handle);
    }
  }
}
