package io.curvine;

import java.io.EOFException;
import java.io.FileNotFoundException;
import java.io.IOException;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.ParentNotDirectoryException;
import org.apache.hadoop.fs.PathIsDirectoryException;
import org.apache.hadoop.fs.PathIsNotEmptyDirectoryException;
import org.apache.hadoop.security.AccessControlException;

/**
 * The one mapping from native error codes (curvine_common::ErrorCode, plus the JNI
 * layer's own codes >= 100) to the exceptions Hadoop callers expect.
 */
public final class NativeErrors {
  public static final int NOT_FOUND = 2;
  public static final int ALREADY_EXISTS = 3;
  public static final int NOT_A_DIRECTORY = 4;
  public static final int IS_A_DIRECTORY = 5;
  public static final int DIRECTORY_NOT_EMPTY = 6;
  public static final int PERMISSION_DENIED = 7;
  public static final int NO_SUCH_XATTR = 20;
  public static final int UNAUTHENTICATED = 23;
  public static final int NOT_PERMITTED = 26;
  public static final int EOF = 100;
  public static final int CLOSED = 101;
  public static final int PANIC = 102;
  public static final int INVALID = 103;

  private NativeErrors() {}

  /** Called from native code; must not throw. */
  public static Throwable create(int code, String message) {
    switch (code) {
      case NOT_FOUND:
        return new FileNotFoundException(message);
      case ALREADY_EXISTS:
        return new FileAlreadyExistsException(message);
      case NOT_A_DIRECTORY:
        return new ParentNotDirectoryException(message);
      case IS_A_DIRECTORY:
        return new IsADirectoryException(message);
      case DIRECTORY_NOT_EMPTY:
        return new PathIsNotEmptyDirectoryException(message);
      case PERMISSION_DENIED:
      case NOT_PERMITTED:
      case UNAUTHENTICATED:
        return new AccessControlException(message);
      case EOF:
        return new EOFException(message);
      default:
        return new CurvineIOException(code, message);
    }
  }

  /** A path is a directory where a file was expected. */
  public static final class IsADirectoryException extends PathIsDirectoryException {
    private static final long serialVersionUID = 1L;
    private final String message;

    IsADirectoryException(String message) {
      super(message);
      this.message = message;
    }

    @Override
    public String getMessage() {
      return message;
    }
  }

  /** Any other failure, with the native error code. */
  public static final class CurvineIOException extends IOException {
    private static final long serialVersionUID = 1L;
    private final int code;

    CurvineIOException(int code, String message) {
      super(message + " [code " + code + "]");
      this.code = code;
    }

    public int code() {
      return code;
    }
  }
}
