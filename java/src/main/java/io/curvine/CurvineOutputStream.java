package io.curvine;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import org.apache.hadoop.fs.FSExceptionMessages;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.StreamCapabilities;
import org.apache.hadoop.fs.Syncable;

/**
 * A file opened for writing. Small writes are gathered in a heap buffer to save JNI
 * crossings; large writes and direct ByteBuffers go straight to the native writer.
 * The file becomes visible with its data and final length when {@link #close()}
 * returns. {@link #hflush()} and {@link #hsync()} commit everything written so far on
 * every replica and publish it: a reader that opens the file afterwards sees all of it,
 * and the data stays even if this writer dies before closing. Each sync with new data
 * ends the current block, so syncing after every few bytes makes many small blocks.
 */
public class CurvineOutputStream extends OutputStream implements Syncable, StreamCapabilities {
  private final long handle;
  private final String path;
  private final FileSystem.Statistics stats;
  private final byte[] buf;
  private int bufLen;
  private volatile boolean closed;

  CurvineOutputStream(long handle, String path, int bufferSize, FileSystem.Statistics stats) {
    this.handle = handle;
    this.path = path;
    this.stats = stats;
    this.buf = new byte[Math.max(bufferSize, 512)];
  }

  /** The file length when the stream was opened (non-zero for an append). */
  long startPosition() throws IOException {
    return NativeFs.writerPos(handle);
  }

  private void checkOpen() throws IOException {
    if (closed) {
      throw new IOException(FSExceptionMessages.STREAM_IS_CLOSED + ": " + path);
    }
  }

  private void count(int n) {
    if (stats != null) {
      stats.incrementBytesWritten(n);
    }
  }

  private void drain() throws IOException {
    if (bufLen > 0) {
      int n = bufLen;
      bufLen = 0;
      NativeFs.write(handle, buf, 0, n);
    }
  }

  @Override
  public synchronized void write(int b) throws IOException {
    checkOpen();
    if (bufLen == buf.length) {
      drain();
    }
    buf[bufLen++] = (byte) b;
    count(1);
  }

  @Override
  public synchronized void write(byte[] b, int off, int len) throws IOException {
    checkOpen();
    if (b == null) {
      throw new NullPointerException("null buffer");
    }
    if (off < 0 || len < 0 || len > b.length - off) {
      throw new IndexOutOfBoundsException("off=" + off + " len=" + len + " buffer=" + b.length);
    }
    if (len == 0) {
      return;
    }
    if (len >= buf.length / 2) {
      drain();
      NativeFs.write(handle, b, off, len);
    } else {
      if (len > buf.length - bufLen) {
        drain();
      }
      System.arraycopy(b, off, buf, bufLen, len);
      bufLen += len;
    }
    count(len);
  }

  /** Write the remaining bytes of {@code src} (zero-copy for a direct buffer). */
  public synchronized void write(ByteBuffer src) throws IOException {
    checkOpen();
    int len = src.remaining();
    if (len == 0) {
      return;
    }
    drain();
    if (src.isDirect()) {
      NativeFs.writeDirect(handle, src, src.position(), len);
    } else if (src.hasArray()) {
      NativeFs.write(handle, src.array(), src.arrayOffset() + src.position(), len);
    } else {
      byte[] tmp = new byte[len];
      src.duplicate().get(tmp);
      NativeFs.write(handle, tmp, 0, len);
    }
    src.position(src.position() + len);
    count(len);
  }

  /** Hands buffered bytes to the native writer (no network round trip). */
  @Override
  public synchronized void flush() throws IOException {
    checkOpen();
    drain();
  }

  @Override
  public synchronized void hflush() throws IOException {
    checkOpen();
    drain();
    NativeFs.sync(handle);
  }

  /**
   * Same as {@link #hflush()}: committed blocks are as durable as their tier's fsync
   * policy ({@code worker.fsync_*}) makes them.
   */
  @Override
  public void hsync() throws IOException {
    hflush();
  }

  @Override
  public boolean hasCapability(String capability) {
    switch (capability.toLowerCase(java.util.Locale.ROOT)) {
      case StreamCapabilities.HFLUSH:
      case StreamCapabilities.HSYNC:
        return true;
      default:
        return false;
    }
  }

  /** Completes the file; a second close does nothing. */
  @Override
  public synchronized void close() throws IOException {
    if (closed) {
      return;
    }
    closed = true;
    try {
      drain();
    } catch (IOException e) {
      try {
        NativeFs.closeWriter(handle);
      } catch (IOException suppressed) {
        e.addSuppressed(suppressed);
      }
      throw e;
    }
    NativeFs.closeWriter(handle);
  }
}
