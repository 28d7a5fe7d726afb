//! `export --format parquet`: the dump as tables, read by DuckDB (the
//! oracle, from PyPI: scripts/test.sh installs it into target/py). DuckDB's
//! answers over the files equal the command line's: `summary`'s fields,
//! `top --by site`'s rows, `leaks`' classes, and `diff`'s growth by site
//! across two dumps' directories read as one table. The columns' types and
//! nullability are DESIGN.md's.

use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Python with DuckDB, as scripts/test.sh installs it.
fn duckdb_python() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/py/bin/python");
    assert!(p.exists(), "{} missing: scripts/test.sh installs DuckDB (pip) into the venv target/py", p.display());
    p
}

/// The rows DuckDB answers `sql` with, each a JSON object by column name.
fn duckdb(sql: &str) -> Vec<Value> {
    let script = "import duckdb, json, sys\n\
                  r = duckdb.sql(sys.argv[1])\n\
                  cols = r.columns\n\
                  print(json.dumps([dict(zip(cols, row)) for row in r.fetchall()]))";
    let o = std::process::Command::new(duckdb_python()).arg("-c").arg(script).arg(sql).output().unwrap();
    let out = ok(&o);
    match serde_json::from_str(&out).unwrap() {
        Value::Array(rows) => rows,
        other => panic!("not rows: {other}"),
    }
}

fn export(dump: &Path, dir: &Path) {
    let o = heapdump().arg("export").arg(dump).args(["--format", "parquet", "-o"]).arg(dir).output().unwrap();
    ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("heapdump: wrote") && err.contains("blocks "), "{err}");
}

fn table(dir: &Path, name: &str) -> String {
    format!("read_parquet('{}')", dir.join(format!("{name}.parquet")).display())
}

/// `top --by site` in SQL: blocks by their site's label.
fn top_sql(blocks: &str, sites: &str) -> String {
    format!(
        "SELECT coalesce(s.name, '(no site recorded)') AS key, count(*) AS allocations, sum(b.size) AS bytes \
         FROM {blocks} b LEFT JOIN {sites} s ON s.dump = b.dump AND s.id = b.site \
         GROUP BY ALL ORDER BY bytes DESC, key"
    )
}

#[test]
fn duckdb_answers_summary_top_and_leaks_as_the_cli_does() {
    let d = Scratch::new("parquet");
    let dump = demo_dump(&d);
    let dir = d.path("tables");
    export(&dump, &dir);
    // summary: every field, one row.
    let s = json(&["summary".as_ref(), "--json".as_ref(), dump.as_os_str()]);
    let rows = duckdb(&format!("SELECT * EXCLUDE (dump) FROM {}", table(&dir, "dump")));
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0], s, "dump.parquet's row is summary --json");
    let totals = duckdb(&format!("SELECT count(*) AS n, sum(size) AS bytes, count(DISTINCT dump) AS ids FROM {}", table(&dir, "blocks")));
    assert_eq!(totals[0]["n"], s["allocations"]);
    assert_eq!(totals[0]["bytes"], s["bytes"]);
    assert_eq!(totals[0]["ids"], 1);
    // edges: every pointer between blocks, as the JSON export counts them.
    let j = d.path("all.json");
    ok(&heapdump().arg("export").arg(&dump).args(["--format", "json", "-o"]).arg(&j).output().unwrap());
    let j: Value = serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).unwrap();
    let edges = duckdb(&format!("SELECT count(*) AS n FROM {}", table(&dir, "edges")));
    assert_eq!(edges[0]["n"], j["edges"]);
    assert!(j["edges"].as_u64().unwrap() > 1000, "the demo's lists and maps: {}", j["edges"]);
    // top --by site: the first rows, key by key.
    let top = json(&["top".as_ref(), "--by".as_ref(), "site".as_ref(), "-n".as_ref(), "10".as_ref(), "--json".as_ref(), dump.as_os_str()]);
    let top = top.as_array().unwrap();
    assert!(top.len() >= 5, "the demo has sites: {top:?}");
    let sql = duckdb(&top_sql(&table(&dir, "blocks"), &table(&dir, "sites")));
    let bytes = |rows: &[Value]| rows.iter().take(top.len()).map(|r| r["bytes"].as_u64().unwrap()).collect::<Vec<_>>();
    assert_eq!(bytes(&sql), bytes(top), "the same bytes in the same order");
    for r in top {
        let mine = sql.iter().find(|x| x["key"] == r["key"]).unwrap_or_else(|| panic!("no row {} in {sql:?}", r["key"]));
        assert_eq!((&mine["allocations"], &mine["bytes"]), (&r["allocations"], &r["bytes"]), "{}", r["key"]);
    }
    // leaks: the four classes.
    let l = json(&["leaks".as_ref(), "--json".as_ref(), dump.as_os_str()]);
    let classes = duckdb(&format!("SELECT class, count(*) AS blocks, sum(size) AS bytes FROM {} GROUP BY class", table(&dir, "blocks")));
    for k in ["definitely_lost", "indirectly_lost", "possibly_lost", "still_reachable"] {
        let got =
            classes.iter().find(|c| c["class"] == k).map_or((0, 0), |c| (c["blocks"].as_u64().unwrap(), c["bytes"].as_u64().unwrap()));
        assert_eq!(got, (l[k]["blocks"].as_u64().unwrap(), l[k]["bytes"].as_u64().unwrap()), "{k}");
    }
    assert!(l["definitely_lost"]["blocks"].as_u64().unwrap() > 0, "the demo leaks: {l}");
    // retained: the largest retainer's subtree, through the dominator column.
    let r = json(&["retained".as_ref(), "-n".as_ref(), "1".as_ref(), "--json".as_ref(), dump.as_os_str()]);
    let top_addr = u64::from_str_radix(r[0]["address"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
    let sub = duckdb(&format!(
        "WITH RECURSIVE t(address, size) AS (SELECT address, size FROM {b} WHERE address = {top_addr} \
         UNION ALL SELECT b.address, b.size FROM {b} b JOIN t ON b.dominator = t.address) \
         SELECT sum(size) AS bytes, (SELECT retained FROM {b} WHERE address = {top_addr}) AS retained FROM t",
        b = table(&dir, "blocks")
    ));
    assert_eq!(sub[0]["bytes"], r[0]["retained"], "the dominator column's subtree is what retained says");
    assert_eq!(sub[0]["retained"], r[0]["retained"]);
}

#[test]
fn two_dumps_side_by_side_read_as_one_table_and_give_diffs_growth_by_site() {
    let d = Scratch::new("parquet-diff");
    let prog = compile(&d, "grows.c", &["-O1", "-g"]);
    let first = d.path("g.hdump");
    let (o, dumps) = run_traced(&first, &prog, &[first.to_str().unwrap()], &[]);
    ok(&o);
    assert_eq!(dumps.len(), 2, "{dumps:?}");
    let all = d.path("fleet");
    for (i, dump) in dumps.iter().enumerate() {
        export(dump, &all.join(format!("d{i}")));
    }
    let v = json(&["diff".as_ref(), dumps[0].as_os_str(), dumps[1].as_os_str(), "--json".as_ref()]);
    let glob = |t: &str| format!("read_parquet('{}/*/{t}.parquet')", all.display());
    let sql = format!(
        "WITH per AS ({top}), \
         seq AS (SELECT dump, row_number() OVER (ORDER BY time) AS n FROM {dumps}), \
         old AS (SELECT * FROM per JOIN seq USING (dump) WHERE n = 1), \
         new AS (SELECT * FROM per JOIN seq USING (dump) WHERE n = 2) \
         SELECT coalesce(new.key, old.key) AS key, \
                coalesce(old.allocations, 0) AS old_allocations, coalesce(old.bytes, 0) AS old_bytes, \
                coalesce(new.allocations, 0) AS new_allocations, coalesce(new.bytes, 0) AS new_bytes, \
                coalesce(new.bytes, 0)::BIGINT - coalesce(old.bytes, 0)::BIGINT AS delta_bytes, \
                coalesce(new.allocations, 0)::BIGINT - coalesce(old.allocations, 0)::BIGINT AS delta_allocations \
         FROM old FULL JOIN new ON old.key = new.key \
         WHERE delta_bytes <> 0 OR delta_allocations <> 0 ORDER BY delta_bytes DESC, key",
        top = top_sql(&glob("blocks"), &glob("sites"))
            .replace("SELECT coalesce", "SELECT b.dump, coalesce")
            .replace(" ORDER BY bytes DESC, key", ""),
        dumps = glob("dump"),
    );
    let growth = duckdb(&sql);
    assert_eq!(Value::Array(growth.clone()), v["by_site"], "diff's by_site, in SQL over both directories");
    assert!(growth[0]["key"].as_str().unwrap().contains("growing"), "{growth:?}");
    // Every row of both dumps carries its own id, the same in every table.
    let ids = duckdb(&format!(
        "SELECT (SELECT count(DISTINCT dump) FROM {b}) AS blocks, (SELECT count(DISTINCT dump) FROM {s}) AS sites, \
         (SELECT count(DISTINCT dump) FROM {r}) AS roots, \
         (SELECT count(*) FROM {b} WHERE dump NOT IN (SELECT dump FROM {m})) AS orphans",
        b = glob("blocks"),
        s = glob("sites"),
        r = glob("roots"),
        m = glob("dump")
    ));
    assert_eq!(ids[0], serde_json::json!({"blocks": 2, "sites": 2, "roots": 2, "orphans": 0}));
}

/// A table's columns: name, DuckDB's type, whether it may be null.
type Columns = &'static [(&'static str, &'static str, bool)];

#[test]
fn the_columns_have_designs_types_and_nullability() {
    let (d, dump) = traced("parquet-schema", "leaks.c", &["-O0", "-g"]);
    let dir = d.path("t");
    export(&dump, &dir);
    // (column, DuckDB's type, may be null), per DESIGN.md.
    let want: &[(&str, Columns)] = &[
        (
            "blocks",
            &[
                ("dump", "VARCHAR", false),
                ("address", "UBIGINT", false),
                ("size", "UBIGINT", false),
                ("site", "UINTEGER", true),
                ("type", "VARCHAR", false),
                ("class", "VARCHAR", false),
                ("retained", "UBIGINT", false),
                ("dominator", "UBIGINT", true),
            ],
        ),
        ("edges", &[("dump", "VARCHAR", false), ("from", "UBIGINT", false), ("to", "UBIGINT", false), ("offset", "UBIGINT", false)]),
        ("sites", &[("dump", "VARCHAR", false), ("id", "UINTEGER", false), ("name", "VARCHAR", false), ("frames", "VARCHAR[]", false)]),
        (
            "roots",
            &[
                ("dump", "VARCHAR", false),
                ("kind", "VARCHAR", false),
                ("name", "VARCHAR", false),
                ("to", "UBIGINT", false),
                ("offset", "UBIGINT", false),
            ],
        ),
    ];
    for (t, cols) in want {
        let path = dir.join(format!("{t}.parquet"));
        let types = duckdb(&format!("DESCRIBE SELECT * FROM read_parquet('{}')", path.display()));
        let got: Vec<(String, String)> = types
            .iter()
            .map(|r| (r["column_name"].as_str().unwrap().to_string(), r["column_type"].as_str().unwrap().to_string()))
            .collect();
        let expected: Vec<(String, String)> = cols.iter().map(|(c, ty, _)| (c.to_string(), ty.to_string())).collect();
        assert_eq!(got, expected, "{t}'s columns");
        let rep = duckdb(&format!("SELECT name, repetition_type FROM parquet_schema('{}')", path.display()));
        for (c, _, nullable) in cols.iter() {
            let r = rep.iter().find(|r| r["name"] == *c).unwrap_or_else(|| panic!("{t}.{c} in {rep:?}"));
            let want = if *nullable { "OPTIONAL" } else { "REQUIRED" };
            assert_eq!(r["repetition_type"], want, "{t}.{c}");
        }
    }
    // Lost blocks hang under the root: no dominator; the classes are the
    // leaks --json keys.
    let classes = duckdb(&format!("SELECT DISTINCT class FROM {} ORDER BY class", table(&dir, "blocks")));
    let classes: Vec<&str> = classes.iter().map(|c| c["class"].as_str().unwrap()).collect();
    assert_eq!(classes, ["definitely_lost", "indirectly_lost", "possibly_lost", "still_reachable"]);
    let heads =
        duckdb(&format!("SELECT count(*) AS n FROM {} WHERE class = 'definitely_lost' AND dominator IS NOT NULL", table(&dir, "blocks")));
    assert_eq!(heads[0]["n"], 0);
    // dump.parquet: summary --json's keys, after the id.
    let s = json(&["summary".as_ref(), "--json".as_ref(), dump.as_os_str()]);
    let cols = duckdb(&format!("DESCRIBE SELECT * FROM {}", table(&dir, "dump")));
    let mut cols: Vec<&str> = cols.iter().map(|c| c["column_name"].as_str().unwrap()).collect();
    let mut keys: Vec<&str> = vec!["dump"];
    keys.extend(s.as_object().unwrap().keys().map(String::as_str));
    cols.sort();
    keys.sort();
    assert_eq!(cols, keys, "dump.parquet's columns: the id and summary --json's keys");
}

#[test]
fn parquet_needs_a_directory() {
    let (d, dump) = traced("parquet-usage", "leaks.c", &["-O0", "-g"]);
    for out in ["-".to_string(), d.path("a-file").display().to_string()] {
        std::fs::write(d.path("a-file"), "x").unwrap();
        let o = heapdump().arg("export").arg(&dump).args(["--format", "parquet", "-o", &out]).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("directory"), "{err}");
    }
    assert_eq!(std::fs::read_to_string(d.path("a-file")).unwrap(), "x", "the file is left as it was");
}

#[test]
fn spark_agrees_with_diff_on_growth_by_site_over_three_dumps() {
    // pyspark (PyPI) in local mode, Java from Debian: scripts/test.sh
    // installs both.
    let python = duckdb_python();
    let has = std::process::Command::new(&python).args(["-c", "import pyspark"]).status().unwrap().success();
    assert!(has, "pyspark missing: scripts/test.sh installs it into the venv target/py");
    let d = Scratch::new("parquet-spark");
    let prog = compile(&d, "grows_in_phases.c", &["-O0", "-g"]);
    let (o, dumps) = run_traced(&d.path("ph.hdump"), &prog, &[], &["--threshold", "1M"]);
    ok(&o);
    assert_eq!(dumps.len(), 4, "three threshold dumps and the exit dump: {dumps:?}");
    let fleet = d.path("fleet");
    for (i, dump) in dumps.iter().take(3).enumerate() {
        export(dump, &fleet.join(format!("d{i}")));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/spark_growth.py");
    let o = std::process::Command::new(&python).arg(&script).arg(&fleet).output().unwrap();
    let spark: Value = serde_json::from_str(ok(&o).lines().last().unwrap_or_default()).unwrap();
    let v = json(&["diff".as_ref(), dumps[0].as_os_str(), dumps[2].as_os_str(), "--json".as_ref()]);
    let cli: Vec<Value> =
        v["by_site"].as_array().unwrap().iter().map(|r| serde_json::json!({"site": r["key"], "growth": r["delta_bytes"]})).collect();
    assert_eq!(spark, Value::Array(cli), "Spark's growth by site over the three exports vs diff of the oldest and newest");
    let sites: Vec<&str> = spark.as_array().unwrap().iter().map(|r| r["site"].as_str().unwrap()).collect();
    assert!(sites.iter().any(|s| s.starts_with("phase_b")) && sites.iter().any(|s| s.starts_with("phase_c")), "{sites:?}");
}
