package io.curvine;

import java.io.IOException;
import java.net.URI;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.hadoop.conf.Configuration;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Hadoop configuration -> the native client's settings. Every {@code [client]} key of
 * the cluster TOML can be set as {@code fs.cv.<key>} (plus {@code fs.cv.auth_token});
 * {@code fs.cv.master_addrs} is comma-separated. An unknown {@code fs.cv.*} key logs a
 * warning naming it; a bad value fails with an IOException naming the key.
 */
public final class CurvineConfig {
  private static final Logger LOG = LoggerFactory.getLogger(CurvineConfig.class);
  public static final String PREFIX = "fs.cv.";
  public static final int DEFAULT_PORT = 8995;

  /** fs.cv.* keys used by Hadoop or by the Java side itself, not passed to native code. */
  private static final String[] JAVA_KEYS = {"impl", "impl.disable.cache"};

  /** Java-side settings. */
  public static final String READ_BUFFER_SIZE = PREFIX + "java.read_buffer_size";
  public static final String WRITE_BUFFER_SIZE = PREFIX + "java.write_buffer_size";

  final String[] keys;
  final String[] values;

  private CurvineConfig(String[] keys, String[] values) {
    this.keys = keys;
    this.values = values;
  }

  private static boolean javaKey(String k) {
    if (k.startsWith("java.")) {
      return true;
    }
    for (String j : JAVA_KEYS) {
      if (j.equals(k)) {
        return true;
      }
    }
    return false;
  }

  /** The settings for {@code uri}: its authority (host[:port]) names the master. */
  public static CurvineConfig from(Configuration conf, URI uri) throws IOException {
    Map<String, String> settings = new TreeMap<>();
    for (Map.Entry<String, String> e : conf.getPropsWithPrefix(PREFIX).entrySet()) {
      String k = e.getKey();
      if (javaKey(k)) {
        continue;
      }
      String v = conf.get(PREFIX + k); // resolves ${var} substitutions
      if (v == null) {
        continue;
      }
      int r = NativeFs.checkKey(k, v);
      if (r == 0) {
        settings.put(k, v);
      } else {
        LOG.warn("Unknown configuration key {}{} (value {}): ignored", PREFIX, k, v);
      }
    }
    String authority = uri == null ? null : uri.getAuthority();
    if (authority != null && !authority.isEmpty()) {
      String host = uri.getHost();
      if (host == null) {
        throw new IOException("bad authority in " + uri + ": expected host[:port]");
      }
      int port = uri.getPort() > 0 ? uri.getPort() : DEFAULT_PORT;
      settings.put("master_addrs", host + ":" + port);
    }
    List<String> ks = new ArrayList<>(settings.keySet());
    List<String> vs = new ArrayList<>(settings.values());
    return new CurvineConfig(ks.toArray(new String[0]), vs.toArray(new String[0]));
  }

  String get(String key) {
    for (int i = 0; i < keys.length; i++) {
      if (keys[i].equals(key)) {
        return values[i];
      }
    }
    return null;
  }
}
