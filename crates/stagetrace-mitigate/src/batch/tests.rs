#![allow(clippy::unwrap_used)]
use super::*;
use std::convert::Infallible;

#[tokio::test]
async fn collects_up_to_max_batch_and_keeps_order() {
    let cfg = BatchConfig::default()
        .max_batch(4)
        .max_wait(Duration::from_millis(200));
    let b = Batcher::spawn(cfg, |xs: Vec<u32>| async move {
        Ok::<_, Infallible>(xs.iter().map(|x| x + 100).collect())
    })
    .unwrap();
    let calls: Vec<_> = (0..4u32)
        .map(|i| {
            let b = b.clone();
            tokio::spawn(async move { b.submit(i).await })
        })
        .collect();
    for (i, c) in calls.into_iter().enumerate() {
        let a = c.await.unwrap().unwrap();
        assert_eq!(a.output, i as u32 + 100);
        assert_eq!(a.batch_size, 4);
    }
    let s = b.stats();
    assert_eq!((s.batches, s.batched), (1, 4));
    assert_eq!(s.by_size, vec![0, 0, 0, 1]);
}

#[tokio::test]
async fn registered_callers_all_in_run_without_the_window() {
    // A 10 s window: a batch held for it would time the test out.
    let cfg = BatchConfig::default()
        .max_batch(8)
        .max_wait(Duration::from_secs(10));
    let b = Batcher::spawn(cfg, |xs: Vec<u32>| async move { Ok::<_, Infallible>(xs) }).unwrap();
    let limit = Duration::from_secs(5);
    let (one, two, three) = (b.caller(), b.caller(), b.caller());
    assert_eq!(b.callers(), 3);
    let (x, y) = (b.clone(), b.clone());
    let both = tokio::spawn(async move { tokio::join!(x.submit(1), y.submit(2)) });
    // Two of three are in; the third leaves instead of sending.
    tokio::time::sleep(Duration::from_millis(20)).await;
    drop(three);
    let (x, y) = tokio::time::timeout(limit, both).await.unwrap().unwrap();
    assert_eq!((x.unwrap().batch_size, y.unwrap().batch_size), (2, 2));
    drop((one, two));
    assert_eq!(b.callers(), 0);
    let s = b.stats();
    assert_eq!((s.ran_full, s.ran_all_in, s.ran_at_window), (0, 1, 0));
}

#[tokio::test]
async fn expired_requests_are_answered_not_run() {
    let ran = Arc::new(AtomicU64::new(0));
    let ran2 = Arc::clone(&ran);
    let cfg = BatchConfig::default()
        .max_batch(1)
        .deadline(Duration::from_millis(30));
    let b = Batcher::spawn(cfg, move |xs: Vec<u32>| {
        ran2.fetch_add(xs.len() as u64, Ordering::Relaxed);
        async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok::<_, Infallible>(xs)
        }
    })
    .unwrap();
    // The first runs (100 ms); the second waits past its 30 ms deadline.
    let b1 = b.clone();
    let first = tokio::spawn(async move { b1.submit(1).await });
    tokio::time::sleep(Duration::from_millis(5)).await;
    let second = b.submit(2).await;
    assert!(first.await.unwrap().is_ok());
    match second {
        Err(BatchError::Expired { waited }) => assert!(waited >= Duration::from_millis(30)),
        other => panic!("expected Expired, got {other:?}"),
    }
    assert_eq!(ran.load(Ordering::Relaxed), 1);
    assert_eq!(b.stats().expired, 1);
    let msg = BatchError::Expired {
        waited: Duration::from_millis(31),
    }
    .to_string();
    assert!(msg.contains("deadline"), "{msg}");
}

#[tokio::test]
async fn full_queue_refuses_and_counts() {
    let cfg = BatchConfig::default().max_batch(1).queue_capacity(1);
    let b = Batcher::spawn(cfg, |xs: Vec<u32>| async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok::<_, Infallible>(xs)
    })
    .unwrap();
    let mut tasks = Vec::new();
    for i in 0..4u32 {
        let b = b.clone();
        tasks.push(tokio::spawn(async move { b.submit(i).await }));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut full = 0;
    for t in tasks {
        if let Err(BatchError::QueueFull { capacity }) = t.await.unwrap() {
            assert_eq!(capacity, 1);
            full += 1;
        }
    }
    // One running, one queued, the other two refused.
    assert_eq!(full, 2);
    assert_eq!(b.stats().queue_full, 2);
}

#[tokio::test]
async fn a_panicking_or_miscounting_model_fails_its_batch_only() {
    let b = Batcher::spawn(
        BatchConfig::default().max_batch(1),
        |xs: Vec<u32>| async move {
            if xs[0] == 0 {
                panic!("boom");
            }
            if xs[0] == 1 {
                return Ok::<_, Infallible>(vec![]);
            }
            Ok(xs)
        },
    )
    .unwrap();
    assert_eq!(
        b.submit(0).await,
        Err(BatchError::Model("the model panicked".into()))
    );
    assert_eq!(
        b.submit(1).await,
        Err(BatchError::OutputCount {
            expected: 1,
            got: 0
        })
    );
    assert_eq!(b.submit(7).await.unwrap().output, 7);
    assert_eq!(b.stats().failed, 2);
}
