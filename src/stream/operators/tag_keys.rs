//! TagKeys: prefixes each row's stream key with the number of its `UNION ALL` input, so
//! that equal keys coming from different inputs stay different rows of the view.

use super::Operator;
use crate::error::Result;
use crate::stream::StreamChunk;

pub struct TagKeys {
    tag: [u8; 3],
}

impl TagKeys {
    pub fn new(input: usize) -> Self {
        let [hi, lo] = (input as u16).to_be_bytes();
        // 0xFF first: hidden row ids of append-only rows (8 bytes, big endian) start with
        // a smaller byte, so a tagged key never equals one of them.
        Self {
            tag: [0xFF, hi, lo],
        }
    }
}

impl Operator for TagKeys {
    fn name(&self) -> &'static str {
        "TagKeys"
    }

    fn process(&mut self, mut chunk: StreamChunk) -> Result<Vec<StreamChunk>> {
        if let Some(keys) = &mut chunk.keys {
            for key in keys.iter_mut() {
                key.splice(0..0, self.tag);
            }
        }
        Ok(vec![chunk])
    }
}
