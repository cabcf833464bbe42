//! The details of allocations in what recent PyTorch writes (`testkit/modern_snapshots.py`):
//! compiled code's FX node and original code under its frame, the forward line of a backward
//! allocation, labels, why a stack is missing; and an OOM file's first device.

use engine::protocol::*;
use engine::Engine;

fn details(e: &mut Engine, doc: DocId, addr: u64) -> Details {
    let Response::Search(found) =
        e.handle(Request::Search { doc, device: 0, kind: Kind::Blocks, query: Query::Address(format!("{addr:#x}")) })
    else {
        panic!("a search answer")
    };
    let element = found.matches.iter().map(|m| m.0).next().expect("an allocation there");
    match e.handle(Request::Details { doc, device: 0, kind: Kind::Blocks, element }) {
        Response::Details(d) => d,
        other => panic!("{other:?}"),
    }
}

#[test]
fn details_show_what_recent_pytorch_writes() {
    let bytes = std::fs::read(testkit::modern(5).join("compiled.pickle")).unwrap();
    let mut e = Engine::new();
    let info = super::open(&mut e, "compiled.pickle", &bytes, 512).unwrap();
    let a = 0x7F00_0000_0000u64;
    let addmm = details(&mut e, info.doc, a);
    assert!(addmm.frames.contains(&"    FX node=addmm, op=call_function, target=aten.addmm.default".to_string()));
    assert!(addmm.frames.iter().any(|l| l.trim() == "a = self.net1(x)"), "{:#?}", addmm.frames);
    assert_eq!(addmm.labels, vec!["activation of net1".to_string()]);
    assert_eq!(addmm.no_stack, None);
    let bw = details(&mut e, info.doc, a + (8 << 20));
    assert_eq!(bw.forward_site.as_deref(), Some("/home/user/model.py:14:forward"));
    assert!(bw.forward_frames.as_deref().is_some_and(|f| f.contains("c = b[:, 0]")));
    let nf = details(&mut e, info.doc, a + (10 << 20));
    assert!(nf.frames.is_empty() && nf.no_stack.as_deref().is_some_and(|c| c.starts_with("no Python frames")));
    assert_eq!(info.summary.devices[0].history_overflowed, Some(true));

    let oom = std::fs::read(testkit::modern(5).join("oom-cuda1.pickle")).unwrap();
    let info = super::open(&mut e, "oom-cuda1.pickle", &oom, 4096).unwrap();
    assert_eq!(info.first_device(), 1);
    assert_eq!(info.devices.iter().map(|d| d.ooms).collect::<Vec<_>>(), vec![0, 1, 0]);
}
