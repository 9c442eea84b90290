//! `slate events setup` and `slate events check` against moto (S3 + SQS): a bucket whose
//! notification configuration already serves another queue and a Lambda function keeps both;
//! slate's entry delivers (a PUT reaches the replica through the daemon); setup run twice
//! changes nothing; check finds a removed entry and a policy that denies the bucket; an
//! overlapping rule of someone else's is named and nothing is changed.

mod common;

use std::collections::BTreeMap;

use common::*;

fn events(args: &[&str]) -> std::process::Output {
    let mut c = slate();
    c.arg("events").args(args);
    run(c)
}

fn make_bucket(bucket: &str) {
    let (st, body) = s3_raw("PUT", &format!("/{bucket}"), "");
    assert!(
        st == 200 || body.contains("BucketAlreadyOwnedByYou"),
        "create bucket: {st} {body}"
    );
}

/// A queue of someone else's: its ARN.
fn other_queue(name: &str) -> String {
    rt().block_on(async {
        let c = sqs_client().await;
        let url = c
            .create_queue()
            .queue_name(name)
            .send()
            .await
            .expect("queue")
            .queue_url
            .expect("url");
        queue_attr(&c, &url, aws_sdk_sqs::types::QueueAttributeName::QueueArn)
            .await
            .expect("arn")
    })
}

async fn queue_attr(
    c: &aws_sdk_sqs::Client,
    url: &str,
    name: aws_sdk_sqs::types::QueueAttributeName,
) -> Option<String> {
    c.get_queue_attributes()
        .queue_url(url)
        .attribute_names(name.clone())
        .send()
        .await
        .expect("attributes")
        .attributes
        .and_then(|a| a.get(&name).cloned())
}

/// The queue's URL, None when there is no such queue.
fn queue_url(name: &str) -> Option<String> {
    rt().block_on(async {
        let c = sqs_client().await;
        c.get_queue_url()
            .queue_name(name)
            .send()
            .await
            .ok()
            .and_then(|o| o.queue_url)
    })
}

fn notification(bucket: &str) -> String {
    let (st, body) = s3_raw("GET", &format!("/{bucket}?notification"), "");
    assert_eq!(st, 200, "{body}");
    body
}

fn put_notification(bucket: &str, xml: &str) {
    let (st, body) = s3_raw("PUT", &format!("/{bucket}?notification"), xml);
    assert_eq!(st, 200, "notification config: {body}");
}

/// Someone else's entries: a queue on `logs/` and a Lambda function on `in/`.
fn others(other_arn: &str) -> String {
    format!(
        "<QueueConfiguration><Id>theirs</Id><Queue>{other_arn}</Queue><Event>s3:ObjectCreated:*</Event>\
         <Filter><S3Key><FilterRule><Name>prefix</Name><Value>logs/</Value></FilterRule></S3Key></Filter>\
         </QueueConfiguration>\
         <CloudFunctionConfiguration><Id>thumbs</Id>\
         <CloudFunction>arn:aws:lambda:us-east-1:123456789012:function:thumbs</CloudFunction>\
         <Event>s3:ObjectCreated:Put</Event>\
         <Filter><S3Key><FilterRule><Name>prefix</Name><Value>in/</Value></FilterRule></S3Key></Filter>\
         </CloudFunctionConfiguration>"
    )
}

#[test]
fn setup_merges_into_a_shared_configuration_and_its_entry_delivers() {
    let bucket = format!("slate-wire-{}", std::process::id());
    let queue = unique("slate-wq");
    let other = other_queue(&unique("their-q"));
    make_bucket(&bucket);
    put_notification(
        &bucket,
        &format!(
            "<NotificationConfiguration>{}</NotificationConfiguration>",
            others(&other)
        ),
    );
    let src = format!("s3://{bucket}/data");
    let ev = format!("sqs://{queue}");

    // before: no queue, check says so
    let out = events(&["check", &src, "--events", &ev]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stdout(&out).contains("no SQS queue"), "{}", stdout(&out));

    // a dry run changes nothing
    let before = notification(&bucket);
    let out = events(&["setup", &src, "--events", &ev, "--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("would create SQS queue"),
        "{}",
        stdout(&out)
    );
    assert!(stdout(&out).contains("would add entry"), "{}", stdout(&out));
    assert_eq!(queue_url(&queue), None, "a dry run made the queue");
    assert_eq!(
        notification(&bucket),
        before,
        "a dry run changed the bucket"
    );

    let out = events(&["setup", &src, "--events", &ev]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    let said = stdout(&out);
    assert!(
        said.contains(&format!("created SQS queue {queue}")),
        "{said}"
    );
    assert!(said.contains("added entry 'slate-"), "{said}");
    assert!(said.contains("kept 2 other entries"), "{said}");
    let after = notification(&bucket);
    assert!(
        after.contains("theirs") && after.contains(&other),
        "their queue kept: {after}"
    );
    assert!(
        after.contains("function:thumbs"),
        "their Lambda kept: {after}"
    );
    assert!(
        after.contains(&queue) && after.contains("data/"),
        "slate's entry: {after}"
    );
    for ev in [
        "s3:ObjectCreated:*",
        "s3:ObjectRemoved:*",
        "s3:LifecycleExpiration:*",
        "s3:ObjectTagging:*",
    ] {
        assert!(after.contains(ev), "{ev}: {after}");
    }

    // twice: nothing changes
    let out = events(&["setup", &src, "--events", &ev]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("nothing to change"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("already lets bucket"),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        notification(&bucket),
        after,
        "the second setup changed the bucket"
    );

    let out = events(&["check", &src, "--events", &ev]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).starts_with("ok:"), "{}", stdout(&out));

    // the entry delivers: the bucket's own events bring a PUT to the replica
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log) = (dir.path().join("s.db"), dir.path().join("d.log"));
    let replica = dir.path().join("replica");
    let mut daemon = Daemon::start(
        &db,
        &src,
        replica.to_str().expect("utf-8"),
        &["--events", &ev],
        &log,
    );
    let store = s3(&bucket);
    let file: BTreeMap<String, Vec<u8>> = [("wired.bin".to_string(), bytes(7, 1000))].into();
    rt().block_on(seed(&store, "data", &file));
    wait_for(
        "the PUT to reach the replica through the wired queue",
        30,
        || std::fs::read(replica.join("wired.bin")).ok().as_deref() == Some(&file["wired.bin"][..]),
    );
    let text = daemon.log_text();
    assert!(
        text.contains("wired.bin"),
        "the daemon's log names the key it applied: {}",
        log_tail(&text)
    );
    assert_eq!(daemon.stop(), Some(0));
}

#[test]
fn check_finds_a_removed_entry_and_a_policy_that_denies_the_bucket() {
    let bucket = format!("slate-wirechk-{}", std::process::id());
    let queue = unique("slate-wc");
    let other = other_queue(&unique("their-c"));
    make_bucket(&bucket);
    let src = format!("s3://{bucket}");
    let ev = format!("sqs://{queue}");
    let out = events(&["setup", &src, "--events", &ev]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = events(&["check", &src, "--events", &ev]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    // another team's deploy overwrites the configuration with its own
    put_notification(
        &bucket,
        &format!(
            "<NotificationConfiguration><QueueConfiguration><Id>theirs</Id><Queue>{other}</Queue>\
             <Event>s3:ObjectRestore:*</Event></QueueConfiguration></NotificationConfiguration>"
        ),
    );
    let out = events(&["check", &src, "--events", &ev]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let said = stdout(&out);
    assert!(
        said.contains("broken: the bucket's notification configuration has no entry for queue"),
        "{said}"
    );
    assert!(
        said.contains("slate events setup"),
        "the repair is named: {said}"
    );
    // setup repairs it, keeping theirs
    let out = events(&["setup", &src, "--events", &ev]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let conf = notification(&bucket);
    assert!(conf.contains(&other) && conf.contains(&queue), "{conf}");
    let out = events(&["check", &src, "--events", &ev]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    // an entry that lost its deletes
    put_notification(
        &bucket,
        &format!(
            "<NotificationConfiguration><QueueConfiguration><Id>slate</Id><Queue>{}</Queue>\
             <Event>s3:ObjectCreated:*</Event></QueueConfiguration></NotificationConfiguration>",
            conf_queue_arn(&queue)
        ),
    );
    let out = events(&["check", &src, "--events", &ev]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("sends s3:ObjectRemoved:*: those changes never reach the daemon"),
        "{}",
        stdout(&out)
    );

    // a policy that denies the bucket: check says so, setup does not overrule it
    let url = queue_url(&queue).expect("queue");
    let arn = conf_queue_arn(&queue);
    let deny = serde_json::json!({"Version": "2012-10-17", "Statement": [
        {"Sid": "lockdown", "Effect": "Deny", "Principal": "*", "Action": "sqs:SendMessage",
         "Resource": arn, "Condition": {"ArnLike": {"aws:SourceArn": "arn:aws:s3:::*"}}}]})
    .to_string();
    rt().block_on(async {
        sqs_client()
            .await
            .set_queue_attributes()
            .queue_url(&url)
            .attributes(aws_sdk_sqs::types::QueueAttributeName::Policy, deny)
            .send()
            .await
            .expect("policy")
    });
    let out = events(&["check", &src, "--events", &ev]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains(&format!(
            "broken: the queue's policy denies bucket {bucket} sqs:SendMessage (statement 'lockdown')"
        )),
        "{}",
        stdout(&out)
    );
    let out = events(&["setup", &src, "--events", &ev]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("denies bucket") && stderr(&out).contains("not changed"),
        "{}",
        stderr(&out)
    );
}

fn conf_queue_arn(queue: &str) -> String {
    let url = queue_url(queue).expect("queue");
    rt().block_on(async {
        queue_attr(
            &sqs_client().await,
            &url,
            aws_sdk_sqs::types::QueueAttributeName::QueueArn,
        )
        .await
        .expect("arn")
    })
}

#[test]
fn an_overlapping_rule_of_someone_elses_is_named_and_nothing_changes() {
    let bucket = format!("slate-wireov-{}", std::process::id());
    let queue = unique("slate-wo");
    let other = other_queue(&unique("their-o"));
    make_bucket(&bucket);
    // theirs takes every create under da…: slate's data/ overlaps it
    put_notification(
        &bucket,
        &format!(
            "<NotificationConfiguration><QueueConfiguration><Id>all-creates</Id><Queue>{other}</Queue>\
             <Event>s3:ObjectCreated:*</Event><Filter><S3Key><FilterRule><Name>prefix</Name>\
             <Value>da</Value></FilterRule></S3Key></Filter></QueueConfiguration></NotificationConfiguration>"
        ),
    );
    let before = notification(&bucket);
    let out = events(&[
        "setup",
        &format!("s3://{bucket}/data"),
        "--events",
        &format!("sqs://{queue}"),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let said = stderr(&out);
    assert!(
        said.contains("entry 'all-creates'") && said.contains("overlaps slate's"),
        "{said}"
    );
    assert!(said.contains("nothing changed"), "{said}");
    assert_eq!(queue_url(&queue), None, "the queue was made all the same");
    assert_eq!(notification(&bucket), before);
}

/// Receives what is in `queue` now (up to `secs` seconds): the bodies.
fn drain(queue: &str, secs: u64) -> Vec<String> {
    let url = queue_url(queue).expect("queue");
    rt().block_on(async {
        let c = sqs_client().await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        let mut out = Vec::new();
        while std::time::Instant::now() < deadline {
            let got = c
                .receive_message()
                .queue_url(&url)
                .max_number_of_messages(10)
                .wait_time_seconds(1)
                .send()
                .await
                .expect("receive");
            for m in got.messages.unwrap_or_default() {
                out.push(m.body.unwrap_or_default());
            }
            if out.iter().any(|b| b.contains("fanned.bin")) {
                break;
            }
        }
        out
    })
}

#[test]
fn a_fanout_through_sns_gives_a_second_consumer_its_own_queue() {
    let bucket = format!("slate-wirefan-{}", std::process::id());
    let (qa, qb) = (unique("slate-fa"), unique("slate-fb"));
    let topic = unique("slate-ft");
    make_bucket(&bucket);
    let src = format!("s3://{bucket}/data");
    let (ea, eb, fan) = (
        format!("sqs://{qa}"),
        format!("sqs://{qb}"),
        format!("sns://{topic}"),
    );
    // the first consumer was wired straight to its queue, for this pair and another of the
    // bucket's
    let out = events(&["setup", &src, "--events", &ea]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let other = format!("s3://{bucket}/other");
    let out = events(&["setup", &other, "--events", &ea]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // a second consumer of the same keys: refused straight, as S3 would refuse it
    let out = events(&["setup", &src, "--events", &eb]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("--fanout sns://TOPIC"),
        "{}",
        stderr(&out)
    );
    assert_eq!(queue_url(&qb), None);

    // through a topic: the first consumer's direct entry gives way to the topic's
    let out = events(&["setup", &src, "--events", &ea, "--fanout", &fan]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    let said = stdout(&out);
    assert!(
        said.contains(&format!("created SNS topic {topic}")),
        "{said}"
    );
    assert!(
        said.contains(&format!("subscribed queue {qa} to the topic")),
        "{said}"
    );
    assert!(said.contains("removed entry 'slate-"), "{said}");
    assert!(said.contains("added entry 'slate-"), "{said}");
    let out = events(&["setup", &src, "--events", &eb, "--fanout", &fan]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    let said = stdout(&out);
    assert!(said.contains(&format!("created SQS queue {qb}")), "{said}");
    assert!(
        said.contains(&format!("subscribed queue {qb} to the topic")),
        "{said}"
    );
    assert!(
        said.contains("nothing to change"),
        "the bucket already sends to the topic: {said}"
    );
    let conf = notification(&bucket);
    assert!(conf.contains(&topic), "{conf}");
    // the other pair's direct entry stays: the topic's covers data/ only
    let out = events(&["check", &other, "--events", &ea]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    // twice: nothing changes
    let out = events(&["setup", &src, "--events", &eb, "--fanout", &fan]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("queue {qb} is subscribed")),
        "{}",
        stdout(&out)
    );
    assert!(!stdout(&out).contains("added"), "{}", stdout(&out));
    for ev in [&ea, &eb] {
        let out = events(&["check", &src, "--events", ev, "--fanout", &fan]);
        assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
        assert!(stdout(&out).starts_with("ok:"), "{}", stdout(&out));
    }
    // without the topic, check sees no entry for the queue itself
    let out = events(&["check", &src, "--events", &ea]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));

    // both consumers get the event: a daemon on the first queue applies it, the second
    // queue holds it too
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log) = (dir.path().join("s.db"), dir.path().join("d.log"));
    let replica = dir.path().join("replica");
    let mut daemon = Daemon::start(
        &db,
        &src,
        replica.to_str().expect("utf-8"),
        &["--events", &ea],
        &log,
    );
    let file: BTreeMap<String, Vec<u8>> = [("fanned.bin".to_string(), bytes(9, 500))].into();
    rt().block_on(seed(&s3(&bucket), "data", &file));
    wait_for("the PUT to reach the replica through the topic", 30, || {
        std::fs::read(replica.join("fanned.bin")).ok().as_deref() == Some(&file["fanned.bin"][..])
    });
    let bodies = drain(&qb, 20);
    assert!(
        bodies
            .iter()
            .any(|b| b.contains("fanned.bin") && b.contains("TopicArn")),
        "the second queue got the event through the topic: {bodies:?}"
    );
    assert_eq!(daemon.stop(), Some(0));
}

/// The EventBridge route: the bucket's notification entries of others stay, the bucket sends
/// to EventBridge, slate's rule sends the pair's events to its queue (a PUT reaches the replica
/// through it), a second pair on the same queue widens the rule, setup twice changes nothing,
/// and check finds EventBridge turned off and a policy that denies the rule. moto delivers
/// S3 → EventBridge → SQS; `scripts/moto_server.py` adds the `<EventBridgeConfiguration/>`
/// its GET ?notification leaves out.
#[test]
fn an_eventbridge_route_delivers_and_check_finds_what_breaks_it() {
    let bucket = format!("slate-wireeb-{}", std::process::id());
    let queue = unique("slate-eb");
    let other = other_queue(&unique("their-eb"));
    make_bucket(&bucket);
    let theirs = format!(
        "<NotificationConfiguration>{}</NotificationConfiguration>",
        others(&other)
    );
    put_notification(&bucket, &theirs);
    let src = format!("s3://{bucket}/data");
    let ev = format!("sqs://{queue}");
    let rule = format!("slate-{bucket}-{queue}");
    let setup = |src: &str, extra: &[&str]| {
        let mut args = vec!["setup", src, "--events", ev.as_str(), "--eventbridge"];
        args.extend_from_slice(extra);
        let out = events(&args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}\n{}",
            stdout(&out),
            stderr(&out)
        );
        stdout(&out)
    };
    let check = |src: &str| events(&["check", src, "--events", ev.as_str(), "--eventbridge"]);

    let said = setup(&src, &["--dry-run"]);
    for line in [
        format!("would create SQS queue {queue}"),
        format!("would create EventBridge rule {rule}"),
        format!("would add queue {queue} as the target of rule {rule}"),
        format!("bucket {bucket}: would turn on delivery to EventBridge"),
        "dry run: nothing changed".to_string(),
    ] {
        assert!(said.contains(&line), "{line}: {said}");
    }
    assert_eq!(queue_url(&queue), None, "a dry run made the queue");
    assert!(!notification(&bucket).contains("EventBridge"));

    let said = setup(&src, &[]);
    for line in [
        format!("created SQS queue {queue}"),
        format!("created EventBridge rule {rule}"),
        "\"detail-type\":[\"Object Created\",\"Object Deleted\",\"Object Tags Added\",\"Object Tags Deleted\"]".to_string(),
        "\"key\":[{\"prefix\":\"data/\"}]".to_string(),
        format!("added queue {queue} as the target of rule {rule}"),
        format!("added statement slate-events-{rule} to the policy of queue {queue}: events.amazonaws.com may sqs:SendMessage (rule {rule})"),
        format!("bucket {bucket}: turned on delivery to EventBridge"),
        "wired: follow it with".to_string(),
    ] {
        assert!(said.contains(&line), "{line}: {said}");
    }
    let conf = notification(&bucket);
    assert!(conf.contains("EventBridgeConfiguration"), "{conf}");
    assert!(
        conf.contains("theirs") && conf.contains("function:thumbs"),
        "their entries kept: {conf}"
    );
    assert!(
        !conf.contains(&queue),
        "no direct entry for the queue: {conf}"
    );

    // twice: nothing changes
    let said = setup(&src, &[]);
    assert!(
        said.contains("nothing changed: every part was there"),
        "{said}"
    );
    let out = check(&src);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).starts_with("ok: bucket"), "{}", stdout(&out));

    // a second pair of the bucket on the same queue: one rule admits both prefixes
    let logs = format!("s3://{bucket}/logs2");
    let said = setup(&logs, &[]);
    assert!(
        said.contains(&format!("updated EventBridge rule {rule}"))
            && said.contains("{\"prefix\":\"data/\"},{\"prefix\":\"logs2/\"}"),
        "{said}"
    );
    for s in [&src, &logs] {
        let out = check(s);
        assert_eq!(out.status.code(), Some(0), "{s}: {}", stdout(&out));
    }
    // a pair of another prefix is not covered until set up
    let out = check(&format!("s3://{bucket}/elsewhere"));
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("not the pair's 'elsewhere/'"),
        "{}",
        stdout(&out)
    );

    // the route delivers: a PUT reaches the replica through EventBridge
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log) = (dir.path().join("s.db"), dir.path().join("d.log"));
    let replica = dir.path().join("replica");
    let mut daemon = Daemon::start(
        &db,
        &src,
        replica.to_str().expect("utf-8"),
        &["--events", &ev],
        &log,
    );
    let file: BTreeMap<String, Vec<u8>> = [("bridged.bin".to_string(), bytes(11, 700))].into();
    rt().block_on(seed(&s3(&bucket), "data", &file));
    wait_for(
        "the PUT to reach the replica through EventBridge",
        30,
        || {
            std::fs::read(replica.join("bridged.bin")).ok().as_deref()
                == Some(&file["bridged.bin"][..])
        },
    );
    assert_eq!(daemon.stop(), Some(0));

    // another team's deploy puts its configuration back without EventBridge
    put_notification(&bucket, &theirs);
    let out = check(&src);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains(&format!(
            "broken: bucket {bucket} does not send its events to EventBridge"
        )) && stdout(&out).contains("--eventbridge` repairs it"),
        "{}",
        stdout(&out)
    );
    let said = setup(&src, &[]);
    assert!(
        said.contains(&format!(
            "bucket {bucket}: turned on delivery to EventBridge"
        )) && said.contains(&format!("EventBridge rule {rule} is there")),
        "{said}"
    );
    assert!(notification(&bucket).contains("theirs"));
    assert_eq!(check(&src).status.code(), Some(0));

    // a queue policy that lets only the bucket's own notifications in
    let url = queue_url(&queue).expect("queue");
    let arn = conf_queue_arn(&queue);
    let only_s3 = serde_json::json!({"Version": "2012-10-17", "Statement": [
        {"Sid": "s3-only", "Effect": "Allow", "Principal": {"Service": "s3.amazonaws.com"},
         "Action": "sqs:SendMessage", "Resource": arn}]})
    .to_string();
    rt().block_on(async {
        sqs_client()
            .await
            .set_queue_attributes()
            .queue_url(&url)
            .attributes(aws_sdk_sqs::types::QueueAttributeName::Policy, only_s3)
            .send()
            .await
            .expect("policy")
    });
    let out = check(&src);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains(&format!(
            "broken: the queue's policy has no statement that lets rule {rule} (events.amazonaws.com) sqs:SendMessage"
        )),
        "{}",
        stdout(&out)
    );
    let said = setup(&src, &[]);
    assert!(
        said.contains(&format!("added statement slate-events-{rule}")),
        "{said}"
    );
    assert_eq!(check(&src).status.code(), Some(0));
}
