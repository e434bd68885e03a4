package io.curvine.contract;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.contract.AbstractContractSeekTest;
import org.apache.hadoop.fs.contract.AbstractFSContract;

public class TestCvContractSeek extends AbstractContractSeekTest {
  @Override
  protected AbstractFSContract createContract(Configuration conf) {
    return new CurvineContract(conf);
  }
}
