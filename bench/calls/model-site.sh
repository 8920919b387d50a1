# Sourced by the evaluation's device calls after bench/calls/budget.sh, in the call that
# carries the third part of `../shared/tools/stage-model --part-mib 33` (44 MiB parts no longer fit the 64 MiB carry beside the working tree; the first two calls
# copied theirs to /tmp/fathom-models): installs the package's wheel (.gpu/wheels, from
# scripts/build-wheel.sh) into /tmp/site, joins and checks the GGUF, installs the gguf reader,
# and exports PYTHONPATH. Gives M, the model folder, EVAL, the evaluation's command at 24 samples
# a cell (commit $C), and METHODS, the D = 64 core methods.
M=/tmp/fathom-models
python3 -m pip install -q --no-deps --no-index --no-compile --upgrade --target /tmp/site .gpu/wheels/*.whl > $L/pip.txt 2>&1; el pip rc=$?
mkdir -p $M && cp .stage/part3/* $M/ && cat $M/smollm2.gguf.[0-9][0-9] > $M/smollm2.gguf && echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $M/smollm2.gguf" | sha256sum -c > $L/join.txt 2>&1 && python3 -m pip install -q --no-index --no-deps --target $M/site $M/gguf-0.19.0-py3-none-any.whl >> $L/join.txt 2>&1; el join rc=$?
export PYTHONPATH=/tmp/site:$M/site PYTHONUNBUFFERED=1
EVAL="python3 -m fathom.eval --model-dir $M --gguf smollm2.gguf --no-speed --no-teacher-forced --samples 24 --commit ${C:-unknown} --host-methods="
METHODS="dense,oracle,fathom(24),fathom(46),sparq(16),pariskv(100)"
