# The Spark jobs on the joinlib topics (services/spark/, docs/spark.md).
# Included from the top-level Makefile (`-include spark.mk`), or on its own: make -f spark.mk spark-deps
#
# spark-deps installs pyspark (requirements-spark.txt) and copies the Kafka/Avro connector jars of the
# same Spark version, with the few dependencies pyspark lacks, from Maven Central into
# $(JOINLIB_SPARK_JARS) (mvn dependency:copy-dependencies of services/spark/pom.xml). The jobs pass
# exactly those files to Spark as spark.jars (services/spark/common.py): nothing is resolved when a
# job starts, so the jobs run offline.

# Do not let these targets become the default goal wherever this file is included.
_SPARK_MK_PREV_GOAL := $(.DEFAULT_GOAL)

PYTHON ?= python3
STAMP ?= .make
JOINLIB_CACHE ?= $(HOME)/.cache/joinlib
# the single source of the Spark version: the pyspark pin
SPARK_VERSION := $(shell sed -n 's/^pyspark==\([0-9][0-9A-Za-z.-]*\).*/\1/p' requirements-spark.txt)
# where the connector jars go; services/spark/common.py looks in the same place (or $JOINLIB_SPARK_JARS)
JOINLIB_SPARK_JARS ?= $(JOINLIB_CACHE)/spark-jars/$(SPARK_VERSION)
SPARK_MVN ?= mvn -q -B -Dstyle.color=never
SPARK_PIP ?= $(PYTHON) -m pip install -q --disable-pip-version-check

.PHONY: spark-deps spark-check spark-test

# pyspark 4.0.1 is an sdist only (~434 MB): the first install builds a wheel (a few minutes; pip caches it)
$(STAMP)/spark-pip: requirements-spark.txt requirements.txt
	@mkdir -p $(STAMP)
	$(SPARK_PIP) -r requirements.txt -r requirements-spark.txt
	@touch $@

$(JOINLIB_SPARK_JARS)/.complete: services/spark/pom.xml requirements-spark.txt
	@test -n "$(SPARK_VERSION)" || { echo "no 'pyspark==X.Y.Z' line in requirements-spark.txt" >&2; exit 1; }
	@command -v mvn >/dev/null 2>&1 || { echo "mvn not found; it fetches the Spark connector jars from Maven Central: apt-get install -y maven" >&2; exit 1; }
	rm -rf "$(JOINLIB_SPARK_JARS).tmp"
	$(SPARK_MVN) -f services/spark/pom.xml dependency:copy-dependencies -Dspark.version=$(SPARK_VERSION) \
		-DincludeScope=runtime -DoutputDirectory="$(JOINLIB_SPARK_JARS).tmp"
	rm -rf "$(JOINLIB_SPARK_JARS)" && mv "$(JOINLIB_SPARK_JARS).tmp" "$(JOINLIB_SPARK_JARS)"
	@touch "$@"

spark-deps: $(STAMP)/spark-pip $(JOINLIB_SPARK_JARS)/.complete ## Install pyspark (requirements-spark.txt) and fetch the Spark Kafka/Avro connector jars (Maven Central)
	@JOINLIB_SPARK_JARS="$(JOINLIB_SPARK_JARS)" $(PYTHON) -c "from services.spark.common import check_spark_setup as c; \
		print('spark-deps: pyspark $(SPARK_VERSION), connector jars:', *c(), sep='\n  ')"

spark-check: spark-deps ## Start a local Spark session with the Kafka and Avro connectors (needs no network)
	@JOINLIB_SPARK_JARS="$(JOINLIB_SPARK_JARS)" $(PYTHON) -c "import time; t = time.monotonic(); \
		from services.spark.common import build_session, result_schema_json; \
		from pyspark.sql import functions as F; from pyspark.sql.avro.functions import from_avro; \
		s = build_session('spark-check'); \
		s.read.format('kafka').option('kafka.bootstrap.servers', '127.0.0.1:9').option('subscribe', 'x').load().schema; \
		s.range(1).select(from_avro(F.lit(b''), result_schema_json())).schema; \
		print(f'spark-check: Spark {s.version} with the Kafka and Avro connectors, up in {time.monotonic() - t:.1f}s'); s.stop()"

spark-test: spark-deps ## Integration tests of the Spark jobs (starts its own Kafka broker)
	JOINLIB_SPARK_JARS="$(JOINLIB_SPARK_JARS)" $(PYTHON) -m pytest tests/integration/test_spark.py

# on its own (make -f spark.mk): spark-deps
.DEFAULT_GOAL := $(or $(_SPARK_MK_PREV_GOAL),spark-deps)
