"""What the Spark jobs share: a local SparkSession with the Kafka and Avro connectors, offline.

Connectors.  pyspark does not ship ``spark-sql-kafka-0-10`` or ``spark-avro``.  ``make spark-deps``
(spark.mk) copies them, with their few dependencies pyspark lacks, from Maven Central into
``$JOINLIB_CACHE/spark-jars/<pyspark version>/`` (``mvn dependency:copy-dependencies`` of
``services/spark/pom.xml``), and :func:`build_session` hands exactly those files to Spark as
``spark.jars``: no ``spark.jars.packages``, no Ivy, no network when a job starts.  Where Spark's own
``jars/`` directory already has the connectors (the ``services/spark/Dockerfile`` image) nothing is
added.  ``JOINLIB_SPARK_JARS`` names another directory.

Decoding.  ``out.<query>`` values are schemaless Avro ``joinlib.ResultBatch`` records (many results
per message, factorised by group); they are decoded in the JVM by spark-avro's ``from_avro`` with
``schemas/ResultBatch.avsc`` (the schema ``joinlib.protocol.records`` uses) and exploded into one row per result,
in PERMISSIVE mode: an undecodable value becomes one row of nulls with ``malformed = true``.

Nothing here starts a JVM at import; :func:`check_spark_setup` checks the installation without one.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path
from typing import Iterable, Optional

from joinlib.protocol.schemas import SCHEMA_DIR

SPARK_DIR = Path(__file__).resolve().parent
REPO_ROOT = SPARK_DIR.parent.parent
LOG4J2_CONF = SPARK_DIR / "log4j2.properties"
RESULT_SCHEMA_FILE = SCHEMA_DIR / "ResultBatch.avsc"

#: file-name prefixes of the jars the jobs need beyond pyspark's own (see services/spark/pom.xml)
CONNECTOR_JARS = (
    "spark-sql-kafka-0-10_2.13-",
    "spark-token-provider-kafka-0-10_2.13-",
    "kafka-clients-",
    "commons-pool2-",
    "spark-avro_2.13-",
)
SETUP_HINT = ("run `make spark-deps` (pip install -r requirements-spark.txt, then the Kafka/Avro connector "
              "jars from Maven Central via services/spark/pom.xml; see docs/spark.md)")

DEFAULT_MASTER = "local[2]"
DEFAULT_SHUFFLE_PARTITIONS = 2


class SparkSetupError(RuntimeError):
    """pyspark, Java or the connector jars are missing or do not fit together; the message says
    what to run."""


# --------------------------------------------------------------------------- environment


from services.common import env, error_line, info_line  # noqa: E402,F401  (shared by every service)


def bootstrap_servers(arg: Optional[str]) -> str:
    """``--bootstrap``, else ``$KAFKA_BOOTSTRAP_SERVERS``; ValueError if neither is set."""
    bs = (arg or "").strip() or env("KAFKA_BOOTSTRAP_SERVERS")
    if not bs:
        raise ValueError("no Kafka broker: pass --bootstrap HOST:PORT or set KAFKA_BOOTSTRAP_SERVERS")
    return bs


def parse_window_ms(text: str) -> int:
    """'1s', '500ms', '2min' or a bare number of ms -> ms (ValueError if not positive and whole)."""
    from joinlib.errors import JoinlibError
    from joinlib.units import parse_duration

    try:
        return parse_duration(text)
    except JoinlibError as e:
        raise ValueError(str(e)) from None


# --------------------------------------------------------------------------- installation


def pyspark_version() -> str:
    try:
        import pyspark
    except ImportError as e:
        raise SparkSetupError(f"pyspark is not installed ({e}); {SETUP_HINT}") from None
    return pyspark.__version__


def spark_home_jars() -> Optional[Path]:
    """The ``jars/`` directory of the Spark that pyspark starts (SPARK_HOME or pyspark's own)."""
    try:
        from pyspark.find_spark_home import _find_spark_home

        home = Path(_find_spark_home())
    except Exception:
        return None
    jars = home / "jars"
    return jars if jars.is_dir() else None


def spark_jars_dir(version: Optional[str] = None) -> Path:
    """Where ``make spark-deps`` puts the connector jars: ``$JOINLIB_SPARK_JARS``, else
    ``$JOINLIB_CACHE/spark-jars/<pyspark version>`` (JOINLIB_CACHE defaults to ~/.cache/joinlib)."""
    explicit = env("JOINLIB_SPARK_JARS")
    if explicit:
        return Path(explicit).expanduser()
    cache = Path(env("JOINLIB_CACHE") or Path.home() / ".cache" / "joinlib").expanduser()
    return cache / "spark-jars" / (version or pyspark_version())


def _find(prefix: str, files: Iterable[Path]) -> Optional[Path]:
    """The jar whose name is ``prefix`` + version (a digit follows the prefix), either Maven's
    ``artifact-1.2.jar`` or Ivy's ``group_artifact-1.2.jar`` (what the Dockerfile copies)."""
    for f in sorted(files):
        name = f.name
        if f.suffix != ".jar":
            continue
        starts = [0]
        i = name.find("_" + prefix)
        if i > 0:
            starts.append(i + 1)
        for start in starts:
            end = start + len(prefix)
            if name.startswith(prefix, start) and name[end:end + 1].isdigit():
                return f
    return None


def _java() -> Optional[str]:
    home = env("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def check_spark_setup() -> list[str]:
    """Check pyspark, Java and the connector jars without starting a JVM; return the jar files to
    pass as ``spark.jars`` (empty when Spark's own jars/ has the connectors).  Raises
    :class:`SparkSetupError` naming what is missing and what to run."""
    version = pyspark_version()
    if _java() is None:
        raise SparkSetupError("no `java` on PATH and no JAVA_HOME: Spark 4 needs a Java 17+ runtime "
                              "(e.g. apt-get install -y openjdk-17-jre-headless)")
    own = spark_home_jars()
    own_files = list(own.glob("*.jar")) if own is not None else []
    if all(_find(p, own_files) for p in CONNECTOR_JARS):
        return []  # e.g. the services/spark/Dockerfile image: connectors on Spark's classpath
    d = spark_jars_dir(version)
    files = list(d.glob("*.jar")) if d.is_dir() else []
    missing = [p.rstrip("-") for p in CONNECTOR_JARS if _find(p, files) is None and _find(p, own_files) is None]
    if missing:
        where = f"{d} does not exist" if not d.is_dir() else f"{d} lacks {', '.join(missing)}"
        raise SparkSetupError(f"the Spark Kafka/Avro connector jars for pyspark {version} are missing ({where}); "
                              f"{SETUP_HINT}")
    for prefix in ("spark-sql-kafka-0-10_2.13-", "spark-avro_2.13-"):
        jar = _find(prefix, files)
        if jar is not None:
            got = jar.name[len(prefix):-len(".jar")]
            if got != version:
                raise SparkSetupError(f"{jar} is for Spark {got} but pyspark is {version}: the connector must match "
                                      f"pyspark exactly; {SETUP_HINT}")
    return [str(f) for f in sorted(files) if any(f.name.startswith(p) for p in CONNECTOR_JARS)]


# --------------------------------------------------------------------------- session


def build_session(app_name: str, *, master: Optional[str] = None,
                  shuffle_partitions: int = DEFAULT_SHUFFLE_PARTITIONS, conf: Optional[dict] = None):
    """A SparkSession (``local[2]`` unless ``master`` or ``$SPARK_MASTER`` say otherwise) with the
    Kafka and Avro connectors, few shuffle partitions, no UI and warnings-only logs."""
    jars = check_spark_setup()
    # Python workers (UDFs) run the interpreter of the job, with joinlib importable
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    master = master or env("SPARK_MASTER") or DEFAULT_MASTER
    java_opts = f"-Dlog4j2.configurationFile={LOG4J2_CONF.as_uri()}"
    settings = {
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.default.parallelism": str(shuffle_partitions),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": java_opts,
    }
    if master.startswith("local"):
        # one machine: no need to resolve the host name (sandboxes, pods without DNS for themselves)
        settings["spark.driver.host"] = "127.0.0.1"
        settings["spark.driver.bindAddress"] = "127.0.0.1"
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if jars:
        settings["spark.jars"] = ",".join(jars)
    settings.update(conf or {})
    builder = SparkSession.builder.appName(app_name).master(master)
    for k, v in settings.items():
        builder = builder.config(k, v)
    try:
        spark = builder.getOrCreate()
    except Exception as e:  # JAVA_GATEWAY_EXITED and friends: the JVM's own error is on stderr above
        raise SparkSetupError(f"Spark did not start ({type(e).__name__}: {e}); check Java 17+ and {SETUP_HINT}") \
            from None
    spark.sparkContext.setLogLevel("WARN")
    return spark


# --------------------------------------------------------------------------- Kafka + Avro


def kafka_security_options() -> dict[str, str]:
    """``kafka.security.protocol``, ``kafka.sasl.*``, ``kafka.ssl.*`` options of the Kafka source from the
    environment (:class:`joinlib.settings.KafkaSecurity`); empty for a PLAINTEXT broker."""
    from joinlib.settings import KafkaSecurity

    return KafkaSecurity.from_env().spark_options()


def result_schema_json() -> str:
    """``schemas/ResultBatch.avsc`` as text (self-contained: no references to other named types)."""
    return RESULT_SCHEMA_FILE.read_text(encoding="utf-8")


def kafka_source(spark, bootstrap: str, *, topics: Optional[list[str]] = None, pattern: Optional[str] = None,
                 streaming: bool = False, include_headers: bool = False):
    """A Kafka DataFrame (key, value, topic, partition, offset, timestamp, ...) of ``topics`` or
    every topic matching ``pattern``, from the earliest offset (to the latest, when not streaming)."""
    reader = spark.readStream if streaming else spark.read
    r = reader.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("startingOffsets", "earliest")
    for k, v in kafka_security_options().items():  # SASL/TLS from the environment (docs/security.md)
        r = r.option(k, v)
    if topics:
        r = r.option("subscribe", ",".join(topics))
    elif pattern:
        r = r.option("subscribePattern", pattern)
    else:
        raise ValueError("kafka_source needs topics or a pattern")
    if not streaming:
        r = r.option("endingOffsets", "latest")
    if include_headers:
        r = r.option("includeHeaders", "true")
    # a long-running job must survive retention deleting data it has not read yet
    return r.option("failOnDataLoss", "false").load()


def decode_results(df):
    """Kafka rows of ``out.*`` -> one row per result: columns query, head, head_ts, emit_ms, ids (map
    stream -> id), malformed (bool), topic, offset.  An undecodable value gives one row with
    malformed = true and null fields."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    r = from_avro(F.col("value"), result_schema_json(), {"mode": "PERMISSIVE"})
    # PERMISSIVE yields a struct of nulls; query is a non-null string in the schema
    b = df.select(r.alias("b"), "topic", "offset").withColumn("malformed", F.col("b.query").isNull())
    groups = (b.where(~F.col("malformed"))
               .select("b.query", "b.emit_ms", F.explode("b.groups").alias("g"), "malformed", "topic", "offset"))
    good = groups.select("query", F.col("g.head").alias("head"), F.col("g.head_ts").alias("head_ts"), "emit_ms",
                         F.explode("g.last_ids").alias("last_id"), "g.ids", "g.last", "malformed", "topic", "offset")
    good = good.select("query", "head", "head_ts", "emit_ms",
                       F.map_concat("ids", F.create_map("last", "last_id")).alias("ids"),
                       "malformed", "topic", "offset")
    bad = b.where(F.col("malformed")).select(
        F.lit(None).cast("string").alias("query"), F.lit(None).cast("string").alias("head"),
        F.lit(None).cast("long").alias("head_ts"), F.lit(None).cast("long").alias("emit_ms"),
        F.lit(None).cast("map<string,bigint>").alias("ids"), "malformed", "topic", "offset")
    return good.unionByName(bad)


def decode_rows(df, query: str, fmt: str, avro_schema: Optional[str] = None):
    """Kafka records of a query's sink topic (result rows, docs/sql.md) -> the columns :func:`decode_results`
    gives, one row per result: ``head`` is ``"rows"`` (a row names no head stream), ``head_ts`` the row's ``ts``,
    ``emit_ms`` the record's Kafka timestamp (the producer's clock when the result site wrote it), ``ids`` the
    row's ``ids``.  ``fmt`` ``json``, or ``avro`` in the Confluent wire format with ``avro_schema`` (the rows'
    schema, :func:`joinlib.rows_avro.row_schema`: the registered one, derived from the query alone)."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    if fmt == "json":
        r = F.from_json(F.col("value").cast("string"), "ts BIGINT, ids MAP<STRING,BIGINT>")
    else:
        assert avro_schema is not None, "Avro rows need their schema"
        body = F.expr("substring(value, 6, length(value) - 5)")   # past the magic byte and the schema id
        r = from_avro(body, avro_schema, {"mode": "PERMISSIVE"})
    b = df.select(r.alias("r"), "timestamp", "topic", "offset")
    b = b.withColumn("malformed", F.col("r.ts").isNull())
    ids = F.col("r.ids") if fmt == "json" else F.from_json(F.to_json(F.col("r.ids")), "MAP<STRING,BIGINT>")
    return b.select(F.lit(query).alias("query"), F.when(~F.col("malformed"), F.lit("rows")).alias("head"),
                    F.col("r.ts").alias("head_ts"), F.unix_millis(F.col("timestamp")).alias("emit_ms"),
                    F.when(~F.col("malformed"), ids).alias("ids"), "malformed", "topic", "offset")


def missing_topics(bootstrap: str, topics: list[str], timeout_s: float = 10.0) -> list[str]:
    """The names of ``topics`` the broker does not have (empty: all there).  Raises
    ``joinlib.adapters.kafka.KafkaUnavailable`` (one line, no client log spam) if no broker answers."""
    from joinlib.adapters.kafka import check_reachable, make_admin

    check_reachable(bootstrap, timeout_s)
    md = make_admin(bootstrap).list_topics(timeout=timeout_s)
    return [t for t in topics if t not in md.topics or md.topics[t].error is not None]


def spark_error_message(e: BaseException) -> str:
    """The first line of a (possibly Java) exception, without the JVM stack trace."""
    text = str(e).strip()
    first = text.splitlines()[0] if text else type(e).__name__
    return re.sub(r"\s+", " ", first)[:500]
