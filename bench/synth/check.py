#!/usr/bin/env python3
"""Checks synth-s3 against boto3, the reference S3 client: what slate relies on must behave as
S3 does. Run: bench/synth/check.sh (builds synth-s3, starts it on 127.0.0.1, runs this).

Checked, for the tree and the flat shape:
- a listing paged 7 keys at a time equals one paged 1000 at a time, and is in UTF-8 byte order;
- StartAfter, Prefix and Delimiter give what the full listing says they must (common prefixes =
  the first segments of the keys under the prefix, each once, in order);
- a GET of the whole object has the listed size and an ETag that is its MD5; ranged GETs are
  slices of it; HEAD agrees;
- PUT, DELETE and CopyObject land in the overlay: listed, read back, hidden;
- the sink hashes what it receives: a single PUT's ETag is the body's MD5, a multipart upload's
  the MD5 of the parts' MD5s and their count; /verify says equal for a faithful copy and names
  a changed object.
"""
import hashlib
import json
import sys
import urllib.request

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

s3_url, admin_url, shape = sys.argv[1], sys.argv[2], sys.argv[3]
s3 = boto3.client(
    "s3",
    endpoint_url=s3_url,
    aws_access_key_id="testing",
    aws_secret_access_key="testing",
    region_name="us-east-1",
    config=Config(s3={"addressing_style": "path"}),
)
SRC, SINK = "synth-src", "synth-sink"
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def listing(bucket, page, **kw):
    keys, prefixes = [], []
    p = s3.get_paginator("list_objects_v2")
    for resp in p.paginate(Bucket=bucket, PaginationConfig={"PageSize": page}, **kw):
        keys += [(o["Key"], o["Size"], o["ETag"]) for o in resp.get("Contents", [])]
        prefixes += [c["Prefix"] for c in resp.get("CommonPrefixes", [])]
    return keys, prefixes


def admin(method, path):
    req = urllib.request.Request(admin_url + path, method=method)
    with urllib.request.urlopen(req) as r:
        return r.read().decode()


full, _ = listing(SRC, 1000)
small, _ = listing(SRC, 7)
names = [k for k, _, _ in full]
check(len(full) > 1000, f"{shape}: {len(full)} keys listed")
check(full == small, f"{shape}: pages of 7 give the listing pages of 1000 give")
check(names == sorted(names, key=lambda k: k.encode()), f"{shape}: UTF-8 byte order")
check(any(not k.isascii() for k in names), f"{shape}: some keys are unicode")

# StartAfter in the middle, and a Prefix
mid = names[len(names) // 2]
after, _ = listing(SRC, 100, StartAfter=mid)
check([k for k, _, _ in after] == names[len(names) // 2 + 1 :], f"{shape}: StartAfter")
pre = names[1234][: len("data/") + 3]
under, _ = listing(SRC, 1000, Prefix=pre)
check([k for k, _, _ in under] == [k for k in names if k.startswith(pre)], f"{shape}: Prefix {pre}")

# Delimiter: the common prefixes are the first segments under the prefix
for prefix in ["data/", names[700][: names[700].index("/", 5) + 1] if shape == "tree" else "data/"]:
    objs, cps = listing(SRC, 50, Prefix=prefix, Delimiter="/")
    want_cps, want_objs = [], []
    for k in names:
        if not k.startswith(prefix):
            continue
        rest = k[len(prefix) :]
        if "/" in rest:
            cp = prefix + rest[: rest.index("/") + 1]
            if not want_cps or want_cps[-1] != cp:
                want_cps.append(cp)
        else:
            want_objs.append(k)
    check(cps == want_cps, f"{shape}: common prefixes under {prefix!r} ({len(cps)} vs {len(want_cps)})")
    check([k for k, _, _ in objs] == want_objs, f"{shape}: objects beside them under {prefix!r}")

# GETs: size, ETag = MD5, ranges, HEAD
for key, size, etag in [full[0], full[len(full) // 3], full[-1]]:
    body = s3.get_object(Bucket=SRC, Key=key)["Body"].read()
    check(len(body) == size, f"{shape}: GET size of {key}")
    check(etag.strip('"') == hashlib.md5(body).hexdigest(), f"{shape}: ETag is the MD5 of {key}")
    part = s3.get_object(Bucket=SRC, Key=key, Range="bytes=5-99")["Body"].read()
    check(part == body[5:100], f"{shape}: ranged GET of {key}")
    head = s3.head_object(Bucket=SRC, Key=key)
    check(head["ContentLength"] == size and head["ETag"] == etag, f"{shape}: HEAD of {key}")

# the overlay: put, copy, delete
s3.put_object(Bucket=SRC, Key="data/zz-put.txt", Body=b"hello", Metadata={"a": "b"}, ContentType="text/plain")
s3.copy_object(Bucket=SRC, Key="data/zz-copy.bin", CopySource={"Bucket": SRC, "Key": names[3]})
s3.delete_object(Bucket=SRC, Key=names[5])
after_keys = [k for k, _, _ in listing(SRC, 1000)[0]]
check("data/zz-put.txt" in after_keys and "data/zz-copy.bin" in after_keys, f"{shape}: PUT and copy listed")
check(names[5] not in after_keys, f"{shape}: DELETE hides a generated object")
check(len(after_keys) == len(names) + 1, f"{shape}: one deleted, two added")
got = s3.get_object(Bucket=SRC, Key="data/zz-put.txt")
check(got["Body"].read() == b"hello" and got["Metadata"] == {"a": "b"}, f"{shape}: PUT read back with metadata")
check(
    s3.get_object(Bucket=SRC, Key="data/zz-copy.bin")["Body"].read()
    == s3.get_object(Bucket=SRC, Key=names[3])["Body"].read(),
    f"{shape}: copy holds the source's bytes",
)

# the sink: single PUT and multipart ETags, /verify
body = b"x" * 1000
r = s3.put_object(Bucket=SINK, Key="one/a", Body=body)
check(r["ETag"].strip('"') == hashlib.md5(body).hexdigest(), f"{shape}: sink PUT ETag")
big = bytes(range(256)) * (12 * 1024 * 1024 // 256 + 3)
cfg = TransferConfig(multipart_threshold=5 * 1024 * 1024, multipart_chunksize=5 * 1024 * 1024)
import io

s3.upload_fileobj(io.BytesIO(big), SINK, "one/big", Config=cfg)
parts = [hashlib.md5(big[i : i + 5 * 1024 * 1024]).digest() for i in range(0, len(big), 5 * 1024 * 1024)]
want = hashlib.md5(b"".join(parts)).hexdigest() + f"-{len(parts)}"
check(s3.head_object(Bucket=SINK, Key="one/big")["ETag"].strip('"') == want, f"{shape}: sink multipart ETag")

# a faithful copy of 50 source objects (bytes through boto3), then one changed
for key in names[:50]:
    if key == names[5]:
        continue
    b = s3.get_object(Bucket=SRC, Key=key)["Body"].read()
    s3.put_object(Bucket=SINK, Key="rep/" + key[len("data/") :], Body=b)
rep = json.loads(admin("GET", "/verify?src=" + urllib.parse.quote(names[0][:0] + "data/") + "&sink=rep/"))
check(rep["same"] == 49, f"{shape}: verify counts the copied objects ({rep})")
check(rep["missing"] == len(after_keys) - 49, f"{shape}: verify counts what is not copied")
s3.put_object(Bucket=SINK, Key="rep/" + names[1][len("data/") :], Body=b"changed")
rep = json.loads(admin("GET", "/verify?src=data/&sink=rep/"))
check(rep["differ"] == 1 and not rep["equal"], f"{shape}: verify names a changed object ({rep['examples']})")

print(f"{shape}: {len(names)} keys; {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
