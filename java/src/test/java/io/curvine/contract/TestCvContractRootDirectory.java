package io.curvine.contract;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.contract.AbstractContractRootDirectoryTest;
import org.apache.hadoop.fs.contract.AbstractFSContract;

public class TestCvContractRootDirectory extends AbstractContractRootDirectoryTest {
  @Override
  protected AbstractFSContract createContract(Configuration conf) {
    return new CurvineContract(conf);
  }
}
