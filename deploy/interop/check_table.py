#!/usr/bin/env python3
"""Checks a floe table independently of floe, with PyIceberg.

Loads the table through the catalog floe wrote it with (sql/SQLite, rest or
hive) and asserts what an analyst relies on:

  * the row count;
  * distinct (_kafka_partition, _kafka_offset) ids == the row count;
  * the schema: column names and Iceberg types, in order;
  * the partition spec (e.g. day(event_ts));
  * the newest snapshot summary carrying floe.offsets.<group> holds exactly
    the expected topic -> partition -> next offset map.

The expectation is one JSON object, from the file named by the only argument
or from stdin ("-" or no argument):

  {"catalog": {"type": "rest", "uri": "http://127.0.0.1:8181"},  # PyIceberg catalog properties
   "catalog_name": "floe",                      # optional, default "floe"
   "table": "analytics.clicks",
   "rows": 30000,
   "columns": [["event_id", "string"], ...],    # [name, type] in order
   "partition": [["event_ts", "day"]],          # [source column, transform]
   "group": "floe-test",
   "offsets": {"clicks": {"0": 2510, "1": 2488}}}

For hdfs:// tables set the catalog property "hdfs.namenode" (host:port, the
same key floe's hdfs IO reads): files are read with hdfs-native (the HDFS RPC
protocol, no JVM or libhdfs) through PyIceberg's fsspec FileIO.

Prints a JSON report on stdout. Exits 0 when every check holds, 1 with the
failed checks named in the report (and on stderr), 2 on bad input.
"""

import json
import sys

import pyarrow.compute as pc
from pyiceberg.catalog import load_catalog
from pyiceberg.io import fsspec as pyiceberg_fsspec


def fail_input(msg):
    print(f"check_table: {msg}", file=sys.stderr)
    sys.exit(2)


def read_expectation(argv):
    if len(argv) > 2:
        fail_input("usage: check_table.py [EXPECTATION.json | -]")
    try:
        if len(argv) == 2 and argv[1] != "-":
            with open(argv[1]) as f:
                want = json.load(f)
        else:
            want = json.load(sys.stdin)
    except (OSError, ValueError) as e:
        fail_input(f"reading the expectation: {e}")
    for key in ("catalog", "table", "rows", "columns", "partition", "group", "offsets"):
        if key not in want:
            fail_input(f"the expectation lacks {key!r}")
    if not isinstance(want["catalog"], dict) or "type" not in want["catalog"]:
        fail_input("catalog: want an object of PyIceberg catalog properties with a type")
    return want


def use_hdfs_native(props):
    """Lets PyIceberg's fsspec FileIO read hdfs:// through hdfs-native."""
    namenode = props.get("hdfs.namenode")
    if not namenode:
        return
    host, _, port = namenode.rpartition(":")
    if not host or not port.isdigit():
        fail_input(f"hdfs.namenode {namenode!r}: want host:port")
    from hdfs_native.fsspec import HdfsFileSystem

    pyiceberg_fsspec.SCHEME_TO_FS["hdfs"] = lambda _props: HdfsFileSystem(host=host, port=int(port))
    props.setdefault("py-io-impl", "pyiceberg.io.fsspec.FsspecFileIO")


def summary_offsets(tbl, group):
    """The offset map of the newest snapshot in the current ancestry that has one."""
    key = f"floe.offsets.{group}"
    snap = tbl.current_snapshot()
    while snap is not None:
        props = snap.summary.additional_properties if snap.summary else {}
        if key in props:
            return snap.snapshot_id, json.loads(props[key])
        snap = tbl.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id else None
    return None, None


def main():
    want = read_expectation(sys.argv)
    props = {k: str(v) for k, v in want["catalog"].items()}
    use_hdfs_native(props)
    report = {"table": want["table"], "catalog": props["type"], "failures": []}
    failures = report["failures"]

    catalog = load_catalog(want.get("catalog_name", "floe"), **props)
    tbl = catalog.load_table(want["table"])
    report["location"] = tbl.location()

    columns = [[f.name, str(f.field_type)] for f in tbl.schema().fields]
    report["columns"] = columns
    if columns != want["columns"]:
        failures.append(f"schema: columns {columns}, want {want['columns']}")

    schema = tbl.schema()
    partition = [[schema.find_column_name(f.source_id), str(f.transform)] for f in tbl.spec().fields]
    report["partition"] = partition
    if partition != want["partition"]:
        failures.append(f"partition spec: {partition}, want {want['partition']}")

    ids = tbl.scan(selected_fields=("_kafka_partition", "_kafka_offset")).to_arrow()
    rows = ids.num_rows
    distinct = ids.group_by(["_kafka_partition", "_kafka_offset"]).aggregate([]).num_rows
    report["rows"] = rows
    report["distinct_ids"] = distinct
    if rows != want["rows"]:
        failures.append(f"row count: {rows}, want {want['rows']}")
    if distinct != rows:
        failures.append(f"duplicates: {rows} rows but {distinct} distinct (_kafka_partition, _kafka_offset) ids")
    if rows:
        report["offset_range"] = [pc.min(ids["_kafka_offset"]).as_py(), pc.max(ids["_kafka_offset"]).as_py()]

    snapshot_id, offsets = summary_offsets(tbl, want["group"])
    report["offsets_snapshot"] = snapshot_id
    report["offsets"] = offsets
    want_offsets = {t: {str(p): int(o) for p, o in parts.items()} for t, parts in want["offsets"].items()}
    if offsets is None:
        failures.append(f"no snapshot summary carries floe.offsets.{want['group']}")
    elif {t: {str(p): int(o) for p, o in parts.items()} for t, parts in offsets.items()} != want_offsets:
        failures.append(f"floe.offsets.{want['group']}: {offsets}, want {want_offsets}")
    report["snapshots"] = len(tbl.metadata.snapshots)

    report["ok"] = not failures
    print(json.dumps(report, indent=1))
    if failures:
        for f in failures:
            print(f"check_table: {f}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
