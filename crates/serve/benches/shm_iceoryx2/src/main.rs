//! iceoryx2 request/response round trip, 4 KiB requests (a 256-query pre-encoded frame) and
//! 2 KiB replies, client and server on two threads, both busy-polling (iceoryx2's fastest mode:
//! its blocking wake-ups go through its event service, a socket per notification).
use iceoryx2::prelude::*;
use std::time::{Duration, Instant};

const REQ: usize = 4096;
const RESP: usize = 2304;

fn main() -> Result<(), Box<dyn core::error::Error>> {
    let secs: f64 = std::env::args().nth(1).map_or(2.0, |s| s.parse().unwrap());
    let name = format!("offload/proto/{}", std::process::id());
    let server_name = name.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let ready = std::sync::Arc::new(std::sync::Barrier::new(2));
    let ready2 = ready.clone();
    let server = std::thread::spawn(move || -> Result<(), String> {
        let node = NodeBuilder::new().create::<ipc::Service>().map_err(|e| format!("{e:?}"))?;
        let service = node
            .service_builder(&server_name.as_str().try_into().map_err(|e| format!("{e:?}"))?)
            .request_response::<[u8], [u8]>()
            .open_or_create()
            .map_err(|e| format!("{e:?}"))?;
        let server = service.server_builder().initial_max_slice_len(RESP).create().map_err(|e| format!("{e:?}"))?;
        ready2.wait();
        let mut n = 0u64;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            while let Some(req) = server.receive().map_err(|e| format!("{e:?}"))? {
                let first = req.payload()[0];
                let resp = req.loan_slice_uninit(RESP).map_err(|e| format!("{e:?}"))?;
                let resp = resp.write_from_fn(|i| first.wrapping_add(i as u8));
                resp.send().map_err(|e| format!("{e:?}"))?;
                n += 1;
            }
            std::hint::spin_loop();
        }
        eprintln!("server answered {n}");
        Ok(())
    });
    let node = NodeBuilder::new().create::<ipc::Service>()?;
    let service = node.service_builder(&name.as_str().try_into()?).request_response::<[u8], [u8]>().open_or_create()?;
    let client = service.client_builder().initial_max_slice_len(REQ).create()?;
    ready.wait();
    std::thread::sleep(Duration::from_millis(100));
    let frame = vec![7u8; REQ];
    let (t0, mut n, mut lat) = (Instant::now(), 0u64, Vec::new());
    while t0.elapsed().as_secs_f64() < secs {
        let t = Instant::now();
        let req = client.loan_slice_uninit(REQ)?;
        let req = req.write_from_slice(&frame);
        let pending = req.send()?;
        loop {
            if let Some(r) = pending.receive()? {
                assert_eq!(r.payload().len(), RESP);
                break;
            }
            std::hint::spin_loop();
        }
        lat.push(t.elapsed().as_nanos() as u64);
        n += 1;
    }
    let el = t0.elapsed().as_secs_f64();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    server.join().unwrap()?;
    lat.sort();
    println!(
        "{{\"transport\":\"iceoryx2-0.10 request_response, busy-poll\",\"request_bytes\":{REQ},\"reply_bytes\":{RESP},\"round_trips\":{n},\"per_s\":{:.0},\"p50_ns\":{},\"p99_ns\":{}}}",
        n as f64 / el, lat[lat.len() / 2], lat[lat.len() * 99 / 100]
    );
    Ok(())
}
