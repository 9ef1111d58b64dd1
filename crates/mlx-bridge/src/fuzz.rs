//! What a graph-lifetime fuzzer needs beyond the ordinary API (feature
//! `fuzz`): [`Slots`], a C++ vector of arrays whose elements are released by
//! each path `mlx::core::array` has, [`async_eval`], the census and
//! [`buffer_overrun`].

use crate::array::to_list;
use crate::ffi::array as raw_array;
use crate::ffi::fuzz as raw;
use crate::{Array, Error, Result};
use cxx::UniquePtr;

/// A `std::vector<mlx::core::array>`. A slot can be moved from, after which
/// it holds an array without a descriptor: reading it is an error here
/// (in C++ it would be undefined behaviour), assigning to it is allowed.
pub struct Slots {
    list: UniquePtr<raw_array::ArrayList>,
    // Whether each slot still holds an array (not moved from).
    live: Vec<bool>,
}

impl Slots {
    pub fn new<I>(arrays: I) -> Slots
    where
        I: IntoIterator,
        I::Item: AsRef<Array>,
    {
        let list = to_list(arrays);
        let live = vec![true; raw_array::array_list_len(&list)];
        Slots { list, live }
    }

    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// Whether slot `i` exists and was not moved from.
    pub fn is_live(&self, i: usize) -> bool {
        self.live.get(i).copied().unwrap_or(false)
    }

    fn check(&self, i: usize, what: &str) -> Result<()> {
        match self.live.get(i) {
            None => Err(Error::new(format!(
                "[{what}] slot {i} of {}",
                self.live.len()
            ))),
            Some(false) => Err(Error::new(format!("[{what}] slot {i} was moved from"))),
            Some(true) => Ok(()),
        }
    }

    /// A new handle to slot `i`'s array.
    pub fn get(&self, i: usize) -> Result<Array> {
        self.check(i, "Slots::get")?;
        Ok(Array::from_raw(raw_array::array_list_get(&self.list, i)?))
    }

    /// `v[i] = a` (copy assignment).
    pub fn assign_copy(&mut self, i: usize, a: &Array) -> Result<()> {
        raw::list_assign_copy(self.list.pin_mut(), i, a.as_raw())?;
        self.live[i] = true;
        Ok(())
    }

    /// `v[i] = std::move(v2[j])` (move assignment); `v2[j]` is left moved-from.
    /// `v2` may be `self` (pass `None`).
    pub fn assign_move(&mut self, i: usize, from: Option<&mut Slots>, j: usize) -> Result<()> {
        if i >= self.len() {
            return Err(Error::new(format!(
                "[Slots::assign_move] slot {i} of {}",
                self.len()
            )));
        }
        let src = from.unwrap_or(self);
        src.check(j, "Slots::assign_move")?;
        // Moved out into a handle first (a move construction, not a release),
        // then moved into the target slot by move assignment.
        let mut moved = raw::list_take(src.list.pin_mut(), j)?;
        src.live[j] = false;
        raw::list_assign_move(self.list.pin_mut(), i, moved.pin_mut())?;
        self.live[i] = true;
        Ok(())
    }

    /// `v[i].overwrite_descriptor(a)`.
    pub fn overwrite(&mut self, i: usize, a: &Array) -> Result<()> {
        self.check(i, "Slots::overwrite")?;
        Ok(raw::list_overwrite(self.list.pin_mut(), i, a.as_raw())?)
    }

    /// Moves slot `i`'s array out, leaving it moved-from.
    pub fn take(&mut self, i: usize) -> Result<Taken> {
        self.check(i, "Slots::take")?;
        let taken = raw::list_take(self.list.pin_mut(), i)?;
        self.live[i] = false;
        Ok(Taken(taken))
    }

    /// `v.erase(v.begin() + i)`: later slots move down by one.
    pub fn erase(&mut self, i: usize) -> Result<()> {
        raw::list_erase(self.list.pin_mut(), i)?;
        self.live.remove(i);
        Ok(())
    }
}

/// An array moved out of its slot, to be let go of elsewhere.
pub struct Taken(UniquePtr<raw_array::Array>);

/// Lets go of `a` on a thread of its own and of `b` on this one at the same
/// instant: two releases that race, as two threads of a server let go of
/// the outputs of one op.
pub fn release_together(a: Taken, b: Taken) -> Result<()> {
    Ok(raw::release_together(a.0, b.0)?)
}

/// `mlx::core::async_eval` of the arrays.
pub fn async_eval<I>(arrays: I) -> Result<()>
where
    I: IntoIterator,
    I::Item: AsRef<Array>,
{
    Ok(raw::async_eval(&to_list(arrays))?)
}

/// Live array descriptors on a census build, `None` elsewhere.
pub fn live_array_descs() -> Option<i64> {
    Some(raw::live_array_descs()).filter(|&n| n >= 0)
}

/// Where the evaluated `a` claims more data than its buffer holds, if it
/// does (a bug that reads or writes past the buffer, seen on any build).
pub fn buffer_overrun(a: &Array) -> Option<String> {
    Some(raw::buffer_overrun(a.as_raw()).to_string()).filter(|s| !s.is_empty())
}

/// Whether `compile` fuses element-wise ops into kernels (MLX's default) or
/// only simplifies the graph (`CompileMode::no_fuse`), for functions
/// compiled from now on.
pub fn set_compile_fusion(fuse: bool) {
    raw::set_compile_fusion(fuse)
}
