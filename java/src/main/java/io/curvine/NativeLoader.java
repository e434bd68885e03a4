package io.curvine;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Locale;

/**
 * Loads libcurvine_jni: {@code -Dcurvine.native.lib=/path/libcurvine_jni.so} if given,
 * else the copy packaged in the jar under {@code /native/linux-x86_64/} (extracted to a
 * temporary file), else {@code System.loadLibrary("curvine_jni")} from
 * {@code -Djava.library.path}.
 */
public final class NativeLoader {
  static final String RESOURCE = "/native/linux-x86_64/libcurvine_jni.so";
  private static volatile boolean loaded;

  private NativeLoader() {}

  public static synchronized void load() {
    if (loaded) {
      return;
    }
    String explicit = System.getProperty("curvine.native.lib");
    if (explicit != null && !explicit.isEmpty()) {
      System.load(Path.of(explicit).toAbsolutePath().toString());
      loaded = true;
      return;
    }
    Throwable packagedFailure = null;
    if (isLinuxX86_64()) {
      try (InputStream in = NativeLoader.class.getResourceAsStream(RESOURCE)) {
        if (in != null) {
          Path tmp = Files.createTempFile("libcurvine_jni", ".so");
          tmp.toFile().deleteOnExit();
          Files.copy(in, tmp, StandardCopyOption.REPLACE_EXISTING);
          System.load(tmp.toAbsolutePath().toString());
          loaded = true;
          return;
        }
      } catch (IOException | UnsatisfiedLinkError e) {
        packagedFailure = e;
      }
    }
    try {
      System.loadLibrary("curvine_jni");
      loaded = true;
    } catch (UnsatisfiedLinkError e) {
      UnsatisfiedLinkError err = new UnsatisfiedLinkError(
          "cannot load libcurvine_jni: not packaged for this platform ("
              + System.getProperty("os.name") + "/" + System.getProperty("os.arch")
              + ") and not on java.library.path (" + e.getMessage() + ")");
      if (packagedFailure != null) {
        err.addSuppressed(packagedFailure);
      }
      throw err;
    }
  }

  static boolean isLinuxX86_64() {
    String os = System.getProperty("os.name", "").toLowerCase(Locale.ROOT);
    String arch = System.getProperty("os.arch", "").toLowerCase(Locale.ROOT);
    return os.contains("linux") && (arch.equals("amd64") || arch.equals("x86_64"));
  }
}
