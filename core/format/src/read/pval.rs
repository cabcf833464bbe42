//! The pickle VM's values ([`PVal`]) and its arena slots ([`Obj`], of a [`Kind`]): shared by
//! the VM, its memo and the model builder, so it imports none of them.

use crate::intern::StrId;
use crate::model::{FrameId, StackId, Trace};

/// A value on the VM stack or in the memo. Containers are arena handles.
#[derive(Clone, Copy, Debug)]
pub(crate) enum PVal {
    None,
    Bool(bool),
    Int(i64),
    Big(u32),
    Float(f64),
    Str(StrId),
    Bytes(u32),
    Obj(u32, u32),
    /// Row `i` of the rows of the list that holds this value.
    Row(u32),
    /// A frames list already interned.
    Stack(StackId),
    /// A frame dict already interned.
    Frame(FrameId),
    /// A trace entry read by the fast path, waiting for the APPENDS that adds it to its list.
    Pending(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    List,
    Dict,
    Tuple,
    Free,
    /// A list interned as a stack; its items were released.
    Stack(StackId),
    /// A dict interned as a frame; its items were released.
    Frame(FrameId),
}

pub(crate) struct Obj {
    pub kind: Kind,
    pub(super) gen: u32,
    pub offset: u64,
    /// The memo slot that last stored this object (`u32::MAX`: none).
    pub(super) memo: u32,
    /// Items; for a dict, keys and values alternate.
    pub items: Vec<PVal>,
    /// Trace entries appended to this list, packed by column.
    pub rows: Option<Box<Trace>>,
}
