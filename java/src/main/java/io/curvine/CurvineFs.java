package io.curvine;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.DelegateToFileSystem;

/**
 * {@code AbstractFileSystem} for {@code cv://} (FileContext and YARN users); set
 * {@code fs.AbstractFileSystem.cv.impl=io.curvine.CurvineFs}.
 */
public class CurvineFs extends DelegateToFileSystem {
  public CurvineFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
    super(uri, new CurvineFileSystem(), conf, CurvineFileSystem.SCHEME, false);
  }

  @Override
  public int getUriDefaultPort() {
    return CurvineFileSystem.DEFAULT_PORT;
  }
}
