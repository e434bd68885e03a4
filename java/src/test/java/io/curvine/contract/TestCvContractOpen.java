package io.curvine.contract;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.contract.AbstractContractOpenTest;
import org.apache.hadoop.fs.contract.AbstractFSContract;

public class TestCvContractOpen extends AbstractContractOpenTest {
  @Override
  protected AbstractFSContract createContract(Configuration conf) {
    return new CurvineContract(conf);
  }
}
