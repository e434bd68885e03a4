#!/usr/bin/env bash
# After `mvn test`: every Hadoop contract suite must have run. A suite whose tests were
# all skipped (a capability or option missing from contract/cv.xml) fails the build,
# as does a missing report. Prints tests/skipped per suite.
#   java/check-contract-suites.sh [REPORT_DIR]   (default: java/target/surefire-reports)
set -euo pipefail
dir="${1:-$(dirname "$0")/target/surefire-reports}"
shopt -s nullglob
reports=("$dir"/TEST-io.curvine.contract.*.xml)
if [ ${#reports[@]} -eq 0 ]; then
  echo "check-contract-suites: no contract suite reports in $dir" >&2
  exit 1
fi
bad=0
for r in "${reports[@]}"; do
  head=$(grep -m1 -o '<testsuite [^>]*>' "$r")
  name=$(sed -n 's/.* name="\([^"]*\)".*/\1/p' <<<"$head")
  tests=$(sed -n 's/.* tests="\([0-9]*\)".*/\1/p' <<<"$head")
  skipped=$(sed -n 's/.* skipped="\([0-9]*\)".*/\1/p' <<<"$head")
  printf '  %-55s tests=%-3s skipped=%s\n' "${name##*.}" "$tests" "$skipped"
  if [ -z "$tests" ] || [ "$tests" -eq 0 ] || [ "${skipped:-0}" -ge "$tests" ]; then
    echo "check-contract-suites: $name ran none of its tests (all skipped)" >&2
    bad=1
  fi
done
exit $bad
