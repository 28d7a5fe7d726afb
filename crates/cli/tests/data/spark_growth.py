"""The Spark job of parquet_tables.rs: growth by site from each process's
oldest dump to its newest, over every export under ROOT (DIR/*/…) read as
one table, in local mode. Prints [{"site", "growth"}] as JSON, largest
growth first. Usage: spark_growth.py ROOT"""
import glob, json, os, shutil, sys, tempfile, zipfile
import pyspark
from pyspark.sql import SparkSession
root = sys.argv[1]
# snappy-java 1.1.10.8 takes its musl library wherever /lib/ld-musl-x86_64.so.1
# exists (musl-tools installs it): handed its glibc one by path instead.
jar = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "snappy-java-*.jar"))[0]
lib = tempfile.mkdtemp()
with zipfile.ZipFile(jar) as z, open(os.path.join(lib, "libsnappyjava.so"), "wb") as out:
    out.write(z.read("org/xerial/snappy/native/Linux/x86_64/libsnappyjava.so"))
spark = (SparkSession.builder.master("local[1]").appName("heapdump-growth")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1")
         .config("spark.driver.extraJavaOptions", f"-Dorg.xerial.snappy.lib.path={lib} -Dorg.xerial.snappy.lib.name=libsnappyjava.so")
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
for t in ["blocks", "sites", "dump"]:
    spark.read.parquet(f"{root}/*/{t}.parquet").createOrReplaceTempView(t)
rows = spark.sql("""
WITH per AS (
  SELECT d.pid, d.time, coalesce(s.name, '(no site recorded)') AS site, sum(b.size) AS bytes
  FROM blocks b JOIN dump d ON d.dump = b.dump
  LEFT JOIN sites s ON s.dump = b.dump AND s.id = b.site
  GROUP BY d.pid, d.time, coalesce(s.name, '(no site recorded)')),
span AS (SELECT pid, min(time) AS first, max(time) AS last FROM per GROUP BY pid)
SELECT site, CAST(sum(CASE WHEN time = last THEN bytes ELSE -bytes END) AS BIGINT) AS growth
FROM per JOIN span USING (pid) WHERE time IN (first, last) AND first < last
GROUP BY site HAVING growth <> 0 ORDER BY growth DESC, site
""").collect()
print(json.dumps([{"site": r["site"], "growth": r["growth"]} for r in rows]))
spark.stop()
shutil.rmtree(lib, ignore_errors=True)
