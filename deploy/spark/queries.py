"""The analyst queries, run by Spark on a table floe wrote.

Spark's Iceberg catalog is a JDBC catalog on the same SQLite database as
floe's SQL catalog, under the same catalog name ("floe": iceberg-go's SQL
catalog stores it in every row, so Spark must use that name). The script
prints each query's result and exits 1 if a check fails:

- the row count and distinct (partition, offset) ids equal `floe verify`'s;
- no (partition, offset) id appears twice;
- every session lives in one Kafka partition, and within a session `seq`
  order is Kafka offset order (per-session order);
- the newest snapshot carries floe's offset map for the group.

Usage: see deploy/spark/run.sh.
"""

import argparse
import json
import sys

from pyspark.sql import SparkSession


def show(spark, title, sql, rows=25):
    print(f"\n-- {title}\n{sql.strip()}")
    df = spark.sql(sql)
    df.show(rows, truncate=False)
    return df.collect()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jars", required=True, help="comma-separated jars: iceberg-spark-runtime, sqlite-jdbc")
    ap.add_argument("--catalog-uri", required=True, help="jdbc:sqlite:/path/catalog.db")
    ap.add_argument("--warehouse", required=True, help="file:///path/warehouse")
    ap.add_argument("--catalog-name", default="floe", help="floe's table.catalog.name (default floe)")
    ap.add_argument("--table", required=True, help="namespace.table")
    ap.add_argument("--group", required=True, help="floe's consumer group (its offset map's key)")
    ap.add_argument("--verify", help="`floe verify --json` output to reconcile with")
    a = ap.parse_args()

    cat = a.catalog_name
    spark = (
        SparkSession.builder.appName("floe-interop")
        .master("local[2]")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.jars", a.jars)
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config(f"spark.sql.catalog.{cat}", "org.apache.iceberg.spark.SparkCatalog")
        .config(f"spark.sql.catalog.{cat}.type", "jdbc")
        .config(f"spark.sql.catalog.{cat}.uri", a.catalog_uri)
        .config(f"spark.sql.catalog.{cat}.jdbc.schema-version", "V1")
        .config(f"spark.sql.catalog.{cat}.warehouse", a.warehouse)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    t = f"{cat}.{a.table}"
    failures = []

    print(f"Spark {spark.version} reading {t}")
    show(spark, "tables in the catalog", f"SHOW TABLES IN {cat}.{a.table.split('.')[0]}")

    per_day = show(spark, "rows per day (the table is partitioned by day(event_ts))", f"""
        SELECT date(event_ts) AS day, count(*) AS rows, count(DISTINCT session_id) AS sessions,
               count(DISTINCT user_id) AS users
        FROM {t} GROUP BY date(event_ts) ORDER BY day""")

    totals = show(spark, "exactly once: rows and distinct Kafka ids", f"""
        SELECT count(*) AS rows,
               count(DISTINCT _kafka_partition, _kafka_offset) AS distinct_ids,
               count(*) - count(DISTINCT _kafka_partition, _kafka_offset) AS duplicates
        FROM {t}""")[0]
    if totals.duplicates != 0:
        failures.append(f"{totals.duplicates} duplicate (partition, offset) ids")
    if sum(r.rows for r in per_day) != totals.rows:
        failures.append("rows per day do not add up to the row count")

    show(spark, "enrichment status", f"""
        SELECT _enrich_status, count(*) AS rows FROM {t} GROUP BY _enrich_status ORDER BY rows DESC""")

    sample = show(spark, "the longest session", f"""
        SELECT session_id, count(*) AS events FROM {t}
        GROUP BY session_id ORDER BY events DESC, session_id LIMIT 1""")[0].session_id
    show(spark, f"session reconstruction: {sample} ordered by seq", f"""
        SELECT seq, event_ts, event_type, url, segment, _kafka_partition, _kafka_offset
        FROM {t} WHERE session_id = '{sample}' ORDER BY seq""", rows=40)

    order = show(spark, "per-session order over all sessions", f"""
        SELECT count(DISTINCT session_id) AS sessions,
               count(DISTINCT CASE WHEN partitions > 1 THEN session_id END) AS sessions_in_several_partitions,
               sum(CASE WHEN prev_offset > _kafka_offset THEN 1 ELSE 0 END) AS seq_order_not_offset_order
        FROM (
          SELECT session_id, _kafka_offset,
                 size(collect_set(_kafka_partition) OVER (PARTITION BY session_id)) AS partitions,
                 lag(_kafka_offset) OVER (PARTITION BY session_id ORDER BY seq) AS prev_offset
          FROM {t})""")[0]
    if order.sessions_in_several_partitions:
        failures.append(f"{order.sessions_in_several_partitions} sessions span several partitions")
    if order.seq_order_not_offset_order:
        failures.append(f"{order.seq_order_not_offset_order} events out of offset order within their session")

    snap = show(spark, "the newest snapshot and floe's offset map", f"""
        SELECT snapshot_id, operation, summary['floe.offsets.{a.group}'] AS offsets
        FROM {t}.snapshots ORDER BY committed_at DESC LIMIT 1""")[0]
    if not snap.offsets:
        failures.append(f"the newest snapshot has no floe.offsets.{a.group}")

    if a.verify:
        with open(a.verify) as f:
            rep = json.load(f)
        print(f"\n-- floe verify: rows {rep['rows']}, distinct ids {rep['distinct_ids']}, "
              f"dead letters {rep['dead_letters']}, snapshot {rep['snapshot_id']}")
        if (rep["rows"], rep["distinct_ids"]) != (totals.rows, totals.distinct_ids):
            failures.append(f"Spark counts {totals.rows} rows / {totals.distinct_ids} ids, "
                            f"floe verify {rep['rows']} / {rep['distinct_ids']}")
        if rep["snapshot_id"] != snap.snapshot_id:
            failures.append(f"Spark's newest snapshot {snap.snapshot_id}, floe verify's {rep['snapshot_id']}")

    spark.stop()
    if failures:
        print("\nFAILED: " + "; ".join(failures))
        return 1
    print(f"\nOK: Spark read {totals.rows} rows in {len(per_day)} day partition(s), no duplicates, per-session order intact")
    return 0


if __name__ == "__main__":
    sys.exit(main())
