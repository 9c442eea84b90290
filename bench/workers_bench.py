"""bench/workers_bench.py — the helper of bench/workers.sh (workers on one PostgreSQL):

    workers_bench.py COMMAND ARGS...

Seeds the backfill's source (on moto, or the s3s-fs of BENCH_S3_ENDPOINT), makes the event buckets and their SQS queues, waits for a
backfill to be reconciled and equal, runs a latency / state-operations phase (a scheduled
writer of new 1 KiB objects, a poller on the local replica, the workers' /metrics read before
and after), checks a local replica against its bucket, and removes what it made. It borrows
the S3 store, the scheduled writer, the poller and the latency summary of
bench/daemon_bench.py. Runs with the python of scripts/services.sh's venv (boto3); figures go
to stdout, one line, for workers.sh to read; progress and problems to stderr.
"""
import concurrent.futures as cf
import hashlib
import multiprocessing as mp
import os
import re
import resource
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import daemon_bench as db  # noqa: E402  (the shared parts of the daemon benchmark)

KIB = 1024
PREFIX = "data/"


def log(msg):
    print("python: " + msg, file=sys.stderr, flush=True)


def die(msg):
    log(msg)
    sys.exit(2)


# =======================================================================================
# /metrics: the workers' Prometheus text, read from 127.0.0.1 only
# =======================================================================================

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$')


def scrape(url):
    """{(name, labels text): value} of one /metrics."""
    if not url.startswith("http://127.0.0.1:"):
        die("metrics URL %s is not on 127.0.0.1" % url)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))   # never a proxy
    with opener.open(url, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m:
            out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def total(sample, name, label=""):
    """The sum of a family's samples whose labels contain `label`."""
    return sum(v for (n, lab), v in sample.items() if n == name and label in lab)


def helper_cpu():
    """CPU seconds of this process and of its children that ended (the poller, `slate pairs`)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def poll_arrivals(dst, sub, n_folders, total, rate, t0, writer_done, arrived, grace):
    """Poller process (daemon_bench.py's _cloud_poll, lighter when many wait): object i is
    looked for in dst once it is due (t0 + i/rate), until it is there with its full size; few
    pending in a folder: stat each, many: list the folder. Every ~2 ms while at most 64 objects
    are pending, every ~20 ms while more are (then the latencies are far longer than that, and
    a poller spinning on thousands of files would take CPU from moto on a small machine)."""
    pending = [dict() for _ in range(n_folders)]     # folder -> {name: index}
    dirs = [os.path.join(dst, sub, "d%03d" % j) for j in range(n_folders)]
    seen = 0
    while True:
        due = min(total, int((time.monotonic() - t0) * rate) + 1) if time.monotonic() >= t0 else 0
        while seen < due:
            pending[seen % n_folders]["f-%06d" % seen] = seen
            seen += 1
        waiting = 0
        for j in range(n_folders):
            pend = pending[j]
            if not pend:
                continue
            if len(pend) > 32:
                try:
                    names = set(os.listdir(dirs[j]))
                except FileNotFoundError:
                    waiting += len(pend)
                    continue
                cand = [nm for nm in pend if nm in names]
            else:
                cand = list(pend)
            for name in cand:
                try:
                    st = os.stat(os.path.join(dirs[j], name))
                except FileNotFoundError:
                    continue
                if st.st_size == KIB:
                    arrived[pend.pop(name)] = time.monotonic()
            waiting += len(pend)
        done_at = writer_done.value
        if done_at > 0 and seen == total and waiting == 0:
            return
        if done_at > 0 and time.monotonic() > done_at + grace:
            return
        time.sleep(0.002 if waiting <= 64 else 0.02)


def scrape_all(urls):
    return [scrape(u) for u in urls]


STATE = ("slate_state_statements_total", "slate_state_transactions_total")


def state_ops(samples, backend):
    """(statements, write transactions, read calls) of `backend`, summed over the workers."""
    b = 'backend="%s"' % backend
    return (sum(total(s, STATE[0], b) for s in samples),
            sum(total(s, STATE[1], b + ',kind="write"') for s in samples),
            sum(total(s, STATE[1], b + ',kind="read"') for s in samples))


def applied(samples):
    """Keys applied without error, per worker (slate_events_applied_total of every pair)."""
    return [total(s, "slate_events_applied_total") for s in samples]


# =======================================================================================
# The state database, read directly (not through the workers: their counts stay clean)
# =======================================================================================

def inbox_count(dbloc, psql):
    """Keys waiting in the inbox; -1 when it cannot be read."""
    if dbloc.startswith("postgres://"):
        try:
            r = subprocess.run([psql, dbloc, "-X", "-tAc", "SELECT COUNT(*) FROM inbox"], capture_output=True,
                               text=True, timeout=30)
            return int(r.stdout.strip()) if r.returncode == 0 else -1
        except (subprocess.SubprocessError, ValueError):
            return -1
    return db.inbox_count(dbloc)


# =======================================================================================
# Setup: the backfill's source, event buckets, queues; teardown
# =======================================================================================

def seed_backfill(bucket, n, size_kib, per_folder):
    """A fresh bucket with n random objects of size_kib KiB, data/dNNN/f-NNNNNN (per_folder a
    folder), BENCH_S3_THREADS PUTs at a time, checked by listing. Prints: n bytes seconds."""
    store = db.S3(bucket)
    store.s3.create_bucket(Bucket=bucket)
    size = size_kib * KIB
    fdig = max(3, len(str((n - 1) // per_folder)))
    keys = ["%sd%0*d/f-%06d" % (PREFIX, fdig, i // per_folder, i) for i in range(n)]
    t0 = time.monotonic()
    done = [0]
    lock = threading.Lock()

    def put(k):
        store.put(k, os.urandom(size))
        with lock:
            done[0] += 1
            if done[0] % 1000 == 0:
                log("  seeded %d of %d (%.0f PUT/s)" % (done[0], n, done[0] / (time.monotonic() - t0)))

    with cf.ThreadPoolExecutor(store.threads) as ex:
        for f in cf.as_completed([ex.submit(put, k) for k in keys]):
            f.result()
    secs = time.monotonic() - t0
    got = store.listing()
    if len(got) != n or any(v[0] != size for v in got.values()):
        die("seeding: %s holds %d objects under %s, want %d of %d bytes" % (bucket, len(got), PREFIX, n, size))
    print("%d %d %.1f" % (n, n * size, secs))


def bucket_create(name):
    """An empty bucket (a backfill's destination on the same S3 server)."""
    db.s3_client("s3").create_bucket(Bucket=name)
    print("ok")


# Azurite's account and key are the emulator's published defaults (no secret).
AZ_ACCOUNT = "devstoreaccount1"
AZ_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def az_container(name):
    """A ContainerClient on Azurite at BENCH_AZ_URL (127.0.0.1 only)."""
    from azure.storage.blob import BlobServiceClient
    url = os.environ.get("BENCH_AZ_URL", "")
    if not url.startswith("http://127.0.0.1:"):
        die("BENCH_AZ_URL %r is not on 127.0.0.1" % url)
    conn = ("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;BlobEndpoint=%s/%s;"
            % (AZ_ACCOUNT, AZ_KEY, url.rstrip("/"), AZ_ACCOUNT))
    return BlobServiceClient.from_connection_string(conn).get_container_client(name)


def container_create(name):
    """An empty container on Azurite (a backfill's destination in another store)."""
    az_container(name).create_container()
    print("ok")


def queue_create(name):
    """An SQS queue that nothing sends to (the backfill's workers need an --events queue)."""
    db.s3_client("sqs").create_queue(QueueName=name)
    print("ok")


def event_bucket(bucket, queue, n_seed):
    """A fresh bucket with n_seed 1 KiB objects under data/seed/, then its ObjectCreated /
    ObjectRemoved notifications → a fresh queue (the seed sends none)."""
    s3, sqs = db.s3_client("s3"), db.s3_client("sqs")
    s3.create_bucket(Bucket=bucket)
    sqs.create_queue(QueueName=queue)
    for i in range(n_seed):
        s3.put_object(Bucket=bucket, Key="%sseed/s-%03d" % (PREFIX, i), Body=os.urandom(KIB))
    db.notify(s3, sqs, bucket, queue)
    print("ok")


def teardown(buckets, queues):
    """Notifications off, queues and buckets (with their objects) removed; '-' names none."""
    import botocore.exceptions
    s3, sqs = db.s3_client("s3"), db.s3_client("sqs")
    buckets = [b for b in buckets.split(",") if b and b != "-"]
    queues = [q for q in queues.split(",") if q and q != "-"]
    for b in buckets:
        try:
            s3.put_bucket_notification_configuration(Bucket=b, NotificationConfiguration={})
        except botocore.exceptions.ClientError:
            pass
    for q in queues:
        try:
            sqs.delete_queue(QueueUrl=db.queue_url(sqs, q))
        except botocore.exceptions.ClientError:
            pass
    for b in buckets:
        try:
            keys = list(db.S3(b, s3).listing(""))
        except botocore.exceptions.ClientError:
            continue
        chunks = [keys[i:i + 1000] for i in range(0, len(keys), 1000)]
        with cf.ThreadPoolExecutor(4) as ex:
            list(ex.map(lambda c: s3.delete_objects(Bucket=b, Delete={
                "Objects": [{"Key": k} for k in c], "Quiet": True}), chunks))
        s3.delete_bucket(Bucket=b)
    log("removed buckets %s and queues %s" % (" ".join(buckets) or "-", " ".join(queues) or "-"))


# =======================================================================================
# Checks of a local replica
# =======================================================================================

def s3_url(dst):
    """(bucket, prefix ending in /) of an s3:// destination, or None for a local folder."""
    if not dst.startswith("s3://"):
        return None
    bucket, _, prefix = dst[len("s3://"):].partition("/")
    return bucket, prefix.rstrip("/") + "/"


def az_url(dst):
    """(container, prefix ending in /) of an az:// destination, or None."""
    if not dst.startswith("az://"):
        return None
    container, _, prefix = dst[len("az://"):].partition("/")
    return container, prefix.rstrip("/") + "/"


def az_listing(dst):
    """{key relative to dst: (size, Content-MD5 as hex or None)} of an az:// destination."""
    container, prefix = az_url(dst)
    out = {}
    for b in az_container(container).list_blobs(name_starts_with=prefix):
        md5 = b.content_settings.content_md5 if b.content_settings else None
        out[b.name[len(prefix):]] = (b.size, bytes(md5).hex() if md5 else None)
    return out


def local_sizes(dst):
    """{key relative to dst: size} of every file (no slate temporary files expected), or of
    every object under an s3:// or az:// destination."""
    if az_url(dst):
        return {k: v[0] for k, v in az_listing(dst).items()}
    at = s3_url(dst)
    if at:
        bucket, prefix = at
        return {k[len(prefix):]: v[0] for k, v in db.S3(bucket).listing(prefix).items()}
    out = {}
    for root, _dirs, files in os.walk(dst):
        for f in files:
            p = os.path.join(root, f)
            try:
                out[os.path.relpath(p, dst)] = os.stat(p).st_size
            except FileNotFoundError:
                pass
    return out


def same_local(bucket, dst):
    """The local folder dst holds exactly the bucket's data/ (every key, its size, and its MD5
    against the listing's ETag: moto's ETag of a single PUT is the MD5). Prints: count bytes."""
    want = db.S3(bucket).listing()
    want_rel = {k[len(PREFIX):]: v for k, v in want.items()}

    def differs(missing, extra, wrong):
        if missing or extra or wrong:
            die("%s differs from s3://%s/%s: %d missing (e.g. %s), %d extra (e.g. %s), %d different (e.g. %s)"
                % (dst, bucket, PREFIX, len(missing), ", ".join(missing[:3]), len(extra), ", ".join(extra[:3]),
                   len(wrong), ", ".join(wrong[:3])))
        print("%d %d" % (len(want), sum(v[0] for v in want.values())))
    if az_url(dst):
        # a container replica: each blob's Content-MD5 (Azure's of a single Put Blob) against
        # the source's ETag; a blob without one (put in blocks) is read and hashed
        got = az_listing(dst)
        missing = sorted(set(want_rel) - set(got))
        extra = sorted(set(got) - set(want_rel))
        wrong = sorted(k for k in set(want_rel) & set(got) if got[k][0] != want_rel[k][0])
        unhashed = sorted(k for k in set(want_rel) & set(got) if got[k][1] is None)
        container, prefix = az_url(dst)
        cc = az_container(container)

        def md5_ok(k):
            if got[k][1] is not None:
                return got[k][1] == want_rel[k][1].strip('"')
            return hashlib.md5(cc.download_blob(prefix + k).readall()).hexdigest() == want_rel[k][1].strip('"')
        if not (missing or extra or wrong):
            with cf.ThreadPoolExecutor(8) as ex:
                wrong = sorted(k for k, ok in zip(want_rel, ex.map(md5_ok, want_rel)) if not ok)
        if unhashed:
            log("  %d blobs had no Content-MD5: read and hashed" % len(unhashed))
        differs(missing, extra, wrong)
        return
    at = s3_url(dst)
    if at:
        # a bucket replica: its ETags (the MD5 of a single PUT) against the source's
        got = {k[len(at[1]):]: v for k, v in db.S3(at[0]).listing(at[1]).items()}
        missing = sorted(set(want_rel) - set(got))
        extra = sorted(set(got) - set(want_rel))
        both = sorted(set(want_rel) & set(got))
        wrong = [k for k in both if got[k][0] != want_rel[k][0]]
        if not wrong and any(got[k][1] is None or want_rel[k][1] is None for k in both):
            # a server that lists no ETags (s3s-fs): both objects read and hashed
            src, rep = db.S3(bucket), db.S3(at[0])

            def md5_of(store, key):
                return hashlib.md5(store.s3.get_object(Bucket=store.bucket, Key=key)["Body"].read()).hexdigest()

            def same(k):
                return md5_of(src, PREFIX + k) == md5_of(rep, at[1] + k)
            log("  the listings carry no ETags: %d objects read on both sides and hashed" % len(both))
            with cf.ThreadPoolExecutor(8) as ex:
                wrong = sorted(k for k, ok in zip(both, ex.map(same, both)) if not ok)
        else:
            wrong = sorted(k for k in both if got[k][1] != want_rel[k][1] or got[k][0] != want_rel[k][0])
        differs(missing, extra, wrong)
        return
    got = local_sizes(dst)
    missing = sorted(set(want_rel) - set(got))
    extra = sorted(set(got) - set(want_rel))
    wrong = sorted(k for k in set(want_rel) & set(got) if got[k] != want_rel[k][0])
    if not (missing or extra or wrong):
        def md5_ok(k):
            h = hashlib.md5()
            with open(os.path.join(dst, k), "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            return h.hexdigest() == want_rel[k][1].strip('"')
        with cf.ThreadPoolExecutor(4) as ex:
            wrong = sorted(k for k, ok in zip(want_rel, ex.map(md5_ok, want_rel)) if not ok)
    differs(missing, extra, wrong)


# =======================================================================================
# The backfill: until the pair is reconciled and the replica holds every object
# =======================================================================================

def backfill_wait(slate, dbloc, bucket, dst, timeout, urls):
    """Polls `slate pairs --db DB` (every 2 s: each poll is a process and a PostgreSQL
    connection, which at 0.5 s cost PostgreSQL ~98 s of CPU over a 450 s run) until the pair's last sync is set, and the
    local replica until it holds every object of the bucket with its size. Prints: wall time
    (Unix seconds) when the pair was seen reconciled, when the replica was seen complete, then
    per worker the bytes it copied (slate_bytes_copied_total of its /metrics), comma-separated,
    and the CPU seconds of this helper and its `slate pairs` polls."""
    urls = urls.split(",")
    want = {k[len(PREFIX):]: v[0] for k, v in db.S3(bucket).listing().items()}
    deadline = time.time() + timeout
    t_synced = t_equal = 0.0
    last_log = time.time()
    while True:
        now = time.time()
        if not t_synced:
            r = subprocess.run([slate, "pairs", "--db", dbloc], capture_output=True, text=True)
            if r.returncode == 0:
                rows = [ln for ln in r.stdout.splitlines() if " -> " in ln]
                if len(rows) > 1:
                    die("more than one pair in %s:\n%s" % (dbloc, r.stdout))
                if rows and " never " not in rows[0]:
                    t_synced = now
                    log("  the pair is reconciled (slate pairs: %s)" % re.sub(r"\s+", " ", rows[0]))
        if t_synced and not t_equal:
            got = local_sizes(dst)
            if got == want:
                t_equal = time.time()
        if t_synced and t_equal:
            break
        if now > deadline:
            die("backfill: %s after %d s (BENCH_BACKFILL_TIMEOUT)"
                % ("the pair not reconciled" if not t_synced else "the replica still incomplete", timeout))
        if now - last_log > 30:
            last_log = now
            log("  backfill: %d of %d objects in the replica" % (len(local_sizes(dst)), len(want)))
        time.sleep(2.0)
    copied = [int(total(s, "slate_bytes_copied_total")) for s in scrape_all(urls)]
    print("%.3f %.3f %s %.1f" % (t_synced, t_equal, ",".join(str(c) for c in copied), helper_cpu()))


# =======================================================================================
# A phase: new 1 KiB objects at a rate, latency per object, state operations per key
# =======================================================================================

def phase(bucket, queue, dst, dbloc, psql, rate, seconds, folders, grace, threads, idle, urls, backend):
    """With the workers following the bucket's queue (their /metrics at urls): read /metrics,
    wait `idle` s, read it again (the idle rate of state operations); then write rate*seconds
    new 1 KiB objects data/lat-R/dNNN/f-NNNNNN at `rate` per second (threads writers on a fixed
    schedule, each PUT's completion recorded) while a forked poller records each one's arrival
    in dst with its full size, until all arrived or `grace` s after the writer stopped; if all
    arrived, wait (up to `grace` s more) until the inbox is empty (read from the database, not
    through the workers) and the workers counted every key applied; read /metrics a last time.
    Prints one line: the latency summary (total missing p50 p99 max mean achieved behind
    during), queue backlog at the writer's end, phase seconds, idle seconds, then for `backend`
    the idle deltas and the phase deltas of statements, write transactions and read calls
    (summed over the workers), the keys each worker applied (comma-separated), and the CPU
    seconds of this helper (writer, poller, checks; see helper_cpu). Objects
    that never arrived are reported (missing), not an error: workers.sh says so."""
    urls = urls.split(",")
    s0 = scrape_all(urls)
    time.sleep(idle)
    s1 = scrape_all(urls)
    t_idle = idle
    n = rate * seconds
    ctx = mp.get_context("fork")
    arrived = ctx.Array("d", n, lock=False)
    writer_done = ctx.Value("d", 0.0, lock=False)
    t0 = time.monotonic() + 0.5
    poller = ctx.Process(target=poll_arrivals, args=(dst, "lat-%d" % rate, folders, n, rate, t0, writer_done,
                                                       arrived, grace), daemon=True)
    poller.start()          # forked before any thread or connection exists
    store = db.S3(bucket, db.s3_client("s3", pool=threads + 4))
    keys = db.lat_keys(store, rate, n, folders)
    blob = os.urandom(n * KIB)
    written = [0.0] * n
    ts, behind, errors = db.start_writers(keys, rate, threads, t0,
                                          lambda i: store.put(keys[i], blob[i * KIB:(i + 1) * KIB]), written)
    for t in ts:
        t.join()
    writer_done.value = time.monotonic()
    db.check_writes(errors, rate, poller)
    sqs = db.s3_client("sqs")
    backlog_w = db.sqs_backlog(sqs, db.queue_url(sqs, queue))
    db.join_poller(poller, grace)
    summary = db.latency_summary(keys, written, arrived, writer_done.value, rate, behind)
    # every key applied and the inbox empty: then the last reading of the counters
    base = sum(applied(s1))
    deadline = time.monotonic() + (grace if summary.split()[1] == "0" else 0)
    while True:
        s2 = None
        if inbox_count(dbloc, psql) == 0:
            s2 = scrape_all(urls)
            if sum(applied(s2)) - base >= n:
                break
        if time.monotonic() > deadline:
            s2 = s2 or scrape_all(urls)
            log("the inbox not empty or not every key applied: the counts are read now")
            break
        time.sleep(0.5)
    t_phase = time.monotonic() - (t0 - 0.5)
    per_worker = [int(a2 - a1) for a1, a2 in zip(applied(s1), applied(s2))]
    idle_d = [b - a for a, b in zip(state_ops(s0, backend), state_ops(s1, backend))]
    phase_d = [b - a for a, b in zip(state_ops(s1, backend), state_ops(s2, backend))]
    print("%s %d %.1f %.1f %s %s %s %.1f" % (summary, backlog_w, t_phase, t_idle, " ".join("%d" % x for x in idle_d),
                                             " ".join("%d" % x for x in phase_d), ",".join(str(x) for x in per_worker),
                                             helper_cpu()))


# =======================================================================================
# Command line
# =======================================================================================

S, I, F = str, int, float
COMMANDS = {
    "seed-backfill": (seed_backfill, S, I, I, I),          # BUCKET N SIZE_KIB PER_FOLDER
    "queue-create": (queue_create, S),                     # QUEUE
    "bucket-create": (bucket_create, S),                   # BUCKET
    "container-create": (container_create, S),             # CONTAINER (Azurite)
    "event-bucket": (event_bucket, S, S, I),               # BUCKET QUEUE N_SEED
    "backfill-wait": (backfill_wait, S, S, S, S, F, S),    # SLATE DB BUCKET DST TIMEOUT URLS
    "same-local": (same_local, S, S),                      # BUCKET DST
    "phase": (phase, S, S, S, S, S, I, I, I, F, I, F, S, S),
    # BUCKET QUEUE DST DB PSQL RATE SECONDS FOLDERS GRACE THREADS IDLE URLS BACKEND
    "teardown": (teardown, S, S),                          # BUCKETS QUEUES (comma-separated)
}


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        die("usage: workers_bench.py %s ARGS..." % "|".join(COMMANDS))
    fn, *types = COMMANDS[sys.argv[1]]
    args = sys.argv[2:]
    if len(args) != len(types):
        die("%s: %d arguments expected, got %d" % (sys.argv[1], len(types), len(args)))
    fn(*(t(a) for t, a in zip(types, args)))


if __name__ == "__main__":
    main()
