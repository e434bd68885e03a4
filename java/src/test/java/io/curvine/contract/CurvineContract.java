package io.curvine.contract;

import io.curvine.CurvineCluster;
import java.io.IOException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.contract.AbstractFSContract;

/** The cv:// contract: options in contract/cv.xml, a cluster from CurvineCluster. */
public class CurvineContract extends AbstractFSContract {
  public static final String CONTRACT_XML = "contract/cv.xml";

  public CurvineContract(Configuration conf) {
    super(conf);
    addConfResource(CONTRACT_XML);
  }

  @Override
  public String getScheme() {
    return "cv";
  }

  @Override
  public FileSystem getTestFileSystem() throws IOException {
    CurvineCluster c = CurvineCluster.get();
    Configuration conf = getConf();
    for (java.util.Map.Entry<String, String> e : c.conf()) {
      if (e.getKey().startsWith("fs.cv.") || e.getKey().startsWith("fs.AbstractFileSystem.cv")) {
        conf.set(e.getKey(), e.getValue());
      }
    }
    return FileSystem.get(c.uri(), conf);
  }

  @Override
  public Path getTestPath() {
    return new Path("/test");
  }
}
