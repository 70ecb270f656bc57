//! Just enough ELF64 reading to check a cubin: its machine (CUDA), the SM it was built for, and
//! the names in its symbol table.

/// `EM_CUDA`.
pub const EM_CUDA: u16 = 190;

#[derive(Debug, Clone)]
pub struct Cubin {
    pub machine: u16,
    pub abi_version: u8,
    pub flags: u32,
    pub symbols: Vec<String>,
}

fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

impl Cubin {
    /// Parses the header and the symbol table; `None` if this is not a 64-bit little-endian ELF.
    pub fn parse(b: &[u8]) -> Option<Cubin> {
        if b.get(0..4)? != b"\x7fELF" || b[4] != 2 || b[5] != 1 {
            return None;
        }
        let machine = u16_at(b, 18)?;
        let flags = u32_at(b, 48)?;
        let shoff = u64_at(b, 40)? as usize;
        let shentsize = u16_at(b, 58)? as usize;
        let shnum = u16_at(b, 60)? as usize;
        let section = |i: usize| -> Option<(u32, usize, usize, u32, usize)> {
            let o = shoff + i * shentsize;
            // (type, offset, size, link, entsize)
            Some((
                u32_at(b, o + 4)?,
                u64_at(b, o + 24)? as usize,
                u64_at(b, o + 32)? as usize,
                u32_at(b, o + 40)?,
                u64_at(b, o + 56)? as usize,
            ))
        };
        let mut symbols = Vec::new();
        for i in 0..shnum {
            let (kind, off, size, link, entsize) = section(i)?;
            if kind != 2 || entsize == 0 {
                continue; // SHT_SYMTAB only
            }
            let (_, str_off, str_size, _, _) = section(link as usize)?;
            let strtab = b.get(str_off..str_off + str_size)?;
            for s in 0..size / entsize {
                let name_off = u32_at(b, off + s * entsize)? as usize;
                let name = strtab.get(name_off..)?.split(|c| *c == 0).next()?;
                if !name.is_empty() {
                    symbols.push(String::from_utf8_lossy(name).into_owned());
                }
            }
        }
        Some(Cubin { machine, abi_version: b[8], flags, symbols })
    }

    /// The SM number in the header: the low byte of e_flags in the older CUDA ELF ABI, the second
    /// byte in the newer one (ABI version 8 and later, used from CUDA 12.8 on).
    pub fn sm(&self) -> u32 {
        if self.abi_version >= 8 { (self.flags >> 8) & 0xff } else { self.flags & 0xff }
    }
}
