package io.curvine.contract;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.contract.AbstractContractRenameTest;
import org.apache.hadoop.fs.contract.AbstractFSContract;

public class TestCvContractRename extends AbstractContractRenameTest {
  @Override
  protected AbstractFSContract createContract(Configuration conf) {
    return new CurvineContract(conf);
  }
}
