//! Pickles written opcode by opcode, as Python's pickler writes a snapshot, for tests and
//! benchmarks that need a shape no real file has (memo slots rewritten, say).

/// A pickle (protocol 4) being written, counting its memo slots.
pub struct Pickle {
    /// The bytes so far.
    pub b: Vec<u8>,
    memo: u32,
}

impl Default for Pickle {
    fn default() -> Self {
        Pickle { b: vec![0x80, 4], memo: 0 }
    }
}

impl Pickle {
    /// Raw opcodes and arguments.
    pub fn op(&mut self, o: &[u8]) -> &mut Self {
        self.b.extend_from_slice(o);
        self
    }

    /// MEMOIZE: the top of the stack into the next slot, which is returned.
    pub fn memoize(&mut self) -> u32 {
        self.b.push(0x94);
        self.memo += 1;
        self.memo - 1
    }

    /// BINGET or LONG_BINGET of slot `i`.
    pub fn get(&mut self, i: u32) -> &mut Self {
        match u8::try_from(i) {
            Ok(i) => self.op(&[b'h', i]),
            Err(_) => self.op(b"j").op(&i.to_le_bytes()),
        }
    }

    /// BINPUT or LONG_BINPUT: the top of the stack into slot `i` (again).
    pub fn put(&mut self, i: u32) -> &mut Self {
        match u8::try_from(i) {
            Ok(i) => self.op(&[b'q', i]),
            Err(_) => self.op(b"r").op(&i.to_le_bytes()),
        }
    }

    /// A short string, memoized; its slot.
    pub fn str(&mut self, s: &str) -> u32 {
        self.b.push(0x8c);
        self.b.push(u8::try_from(s.len()).expect("a short string"));
        self.b.extend_from_slice(s.as_bytes());
        self.memoize()
    }

    /// A value made and popped at once, so that only its memo slot stays; its slot.
    pub fn kept(&mut self, make: impl FnOnce(&mut Pickle) -> u32) -> u32 {
        let i = make(self);
        self.op(b"0");
        i
    }

    /// The keys a snapshot of allocations needs, as memoized strings.
    pub fn keys(&mut self) -> Keys {
        let [action, alloc, addr, size, stream, frames, segments, traces, name, filename, line] = [
            "action",
            "alloc",
            "addr",
            "size",
            "stream",
            "frames",
            "segments",
            "device_traces",
            "name",
            "filename",
            "line",
        ]
        .map(|k| self.kept(|p| p.str(k)));
        Keys { action, alloc, addr, size, stream, frames, segments, traces, name, filename, line }
    }

    /// A frame dict, popped; its slot.
    pub fn frame(&mut self, k: &Keys, name: &str, file: &str, line: u16) -> u32 {
        self.kept(|p| {
            p.op(b"}");
            let d = p.memoize();
            p.op(b"(").get(k.name);
            p.str(name);
            p.get(k.filename);
            p.str(file);
            p.get(k.line).op(b"M").op(&line.to_le_bytes()).op(b"u");
            d
        })
    }

    /// Lists frame dicts once (the reader's general path makes them interned frames), popped.
    pub fn intern_frames(&mut self, frames: &[u32]) {
        for batch in frames.chunks(500) {
            self.kept(|p| {
                p.op(b"]");
                let l = p.memoize();
                p.op(b"(");
                for &f in batch {
                    p.get(f);
                }
                p.op(b"e");
                l
            });
        }
    }

    /// `{"segments": [], "device_traces": [[` and the MARK of the first batch of entries.
    pub fn begin_trace(&mut self, k: &Keys) {
        self.op(b"}");
        self.memoize();
        self.op(b"(").get(k.segments).op(b"]");
        self.memoize();
        self.get(k.traces).op(b"]");
        self.memoize();
        self.op(b"(").op(b"]");
        self.memoize();
        self.op(b"(");
    }

    /// An alloc entry, its frames list new (a list of the frame dicts in these slots).
    pub fn alloc(&mut self, k: &Keys, addr: u32, size: u8, frames: &[u32]) {
        self.op(b"}");
        self.memoize();
        self.op(b"(").get(k.action).get(k.alloc).get(k.addr).op(b"J").op(&addr.to_le_bytes());
        self.get(k.size).op(&[b'K', size]).get(k.stream).op(&[b'K', 0]).get(k.frames).op(b"]");
        self.memoize();
        self.op(b"(");
        for &f in frames {
            self.get(f);
        }
        self.op(b"e").op(b"u");
    }

    /// Closes the last batch of entries, the trace lists and the snapshot.
    pub fn end_trace(&mut self) -> Vec<u8> {
        self.op(b"e").op(b"e").op(b"u").op(b".");
        std::mem::take(&mut self.b)
    }
}

/// The memo slots of a snapshot's keys (see [`Pickle::keys`]).
#[allow(missing_docs)]
pub struct Keys {
    pub action: u32,
    pub alloc: u32,
    pub addr: u32,
    pub size: u32,
    pub stream: u32,
    pub frames: u32,
    pub segments: u32,
    pub traces: u32,
    pub name: u32,
    pub filename: u32,
    pub line: u32,
}
