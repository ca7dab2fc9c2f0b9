//! `stagetrace.stage`'s entry point: a plain C function in front of the
//! pyo3 one (`scope::stage`).
//!
//! `with stagetrace.stage("capture"):` runs `stage(name)` once per stage,
//! and almost always for a name seen before, whose scope object is cached.
//! Through pyo3 that lookup paid the wrapper's fixed cost (its trampoline,
//! the GIL count, the argument parser) several times over the lookup
//! itself, and a call has four stages (`bench/overhead.py`). So the common
//! case, one positional name already in the cache, is answered here with
//! one dictionary lookup; everything else (a new name, `recorder=`, a wrong
//! argument and its error) is passed on unchanged to the pyo3 function.

use std::ffi::CStr;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The scope cache (`scope::CACHE`) and the pyo3 `stage` function, each
/// held by a strong reference that is never given back: the module lives
/// as long as the process.
static CACHE: AtomicPtr<ffi::PyObject> = AtomicPtr::new(ptr::null_mut());
static UNCACHED: AtomicPtr<ffi::PyObject> = AtomicPtr::new(ptr::null_mut());

const DOC: &CStr = c"stage(name, *, recorder=None)\n--\n\n\
`with stagetrace.stage(\"capture\"):` a stage of the current call (nested \
in the stages open in it). The `with` gives the current call (`None` \
outside any call: the stage is then counted as ignored). `recorder`: the \
recorder whose names apply outside a call (default: the process's).";

/// Adds `stage` to the module: this entry, in front of `uncached` (the
/// pyo3 function), answering from `cache`.
pub(crate) fn register(
    m: &Bound<'_, PyModule>,
    cache: &Bound<'_, PyDict>,
    uncached: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let py = m.py();
    CACHE.store(cache.clone().into_ptr(), Ordering::Release);
    UNCACHED.store(uncached.clone().into_ptr(), Ordering::Release);
    // CPython keeps a pointer to the definition for the function's life.
    let def: &'static mut ffi::PyMethodDef = Box::leak(Box::new(ffi::PyMethodDef {
        ml_name: c"stage".as_ptr(),
        ml_meth: ffi::PyMethodDefPointer {
            PyCFunctionFastWithKeywords: entry,
        },
        ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
        ml_doc: DOC.as_ptr(),
    }));
    let module_name = m.name()?;
    // SAFETY: `def` is 'static; the name is a live str; the result is a new
    // reference or NULL with an exception set, which `from_owned_ptr_or_err`
    // takes either way.
    let f = unsafe {
        let f = ffi::PyCFunction_NewEx(def, ptr::null_mut(), module_name.as_ptr());
        Bound::from_owned_ptr_or_err(py, f)?
    };
    m.add("stage", f)
}

/// `stage(*args, **kwargs)` as CPython calls a `METH_FASTCALL |
/// METH_KEYWORDS` function, with the GIL held. Nothing in here can panic.
unsafe extern "C" fn entry(
    _module: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    let cache = CACHE.load(Ordering::Acquire);
    if nargs == 1 && kwnames.is_null() && !cache.is_null() {
        // SAFETY: CPython passes `nargs` live arguments; the cache is a dict
        // kept alive by `CACHE`; the hit is borrowed, so it gets a reference
        // of its own before it is returned.
        unsafe {
            let hit = ffi::PyDict_GetItemWithError(cache, *args);
            if !hit.is_null() {
                ffi::Py_INCREF(hit);
                return hit;
            }
            if !ffi::PyErr_Occurred().is_null() {
                // An unhashable name: the dict's TypeError, as before.
                return ptr::null_mut();
            }
        }
    }
    // SAFETY: as above; `uncached` is set before the function is reachable.
    unsafe { call_uncached(args, nargs, kwnames) }
}

/// Calls the pyo3 `stage` with the same arguments (a tuple and a dict,
/// as the limited API before 3.12 has no vectorcall).
unsafe fn call_uncached(
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY (whole body): `args` holds `nargs` positional arguments then
    // one value per name in `kwnames`; `PyTuple_SetItem` takes the
    // reference it is given, `PyDict_SetItem` makes its own; every object
    // made here is released on every path.
    unsafe {
        let uncached = UNCACHED.load(Ordering::Acquire);
        if uncached.is_null() {
            ffi::PyErr_SetString(ffi::PyExc_RuntimeError, NOT_READY.as_ptr());
            return ptr::null_mut();
        }
        let positional = ffi::PyTuple_New(nargs);
        if positional.is_null() {
            return ptr::null_mut();
        }
        for i in 0..nargs {
            let a = *args.offset(i);
            ffi::Py_INCREF(a);
            ffi::PyTuple_SetItem(positional, i, a);
        }
        let mut keywords = ptr::null_mut();
        let nkw = if kwnames.is_null() {
            0
        } else {
            ffi::PyTuple_Size(kwnames)
        };
        if nkw > 0 {
            keywords = ffi::PyDict_New();
            let mut ok = !keywords.is_null();
            for j in 0..nkw {
                if !ok {
                    break;
                }
                let key = ffi::PyTuple_GetItem(kwnames, j);
                let value = *args.offset(nargs + j);
                ok = !key.is_null() && ffi::PyDict_SetItem(keywords, key, value) == 0;
            }
            if !ok {
                ffi::Py_DECREF(positional);
                ffi::Py_XDECREF(keywords);
                return ptr::null_mut();
            }
        }
        let r = ffi::PyObject_Call(uncached, positional, keywords);
        ffi::Py_DECREF(positional);
        ffi::Py_XDECREF(keywords);
        r
    }
}

const NOT_READY: &CStr = c"stagetrace._native.stage: the module is not initialised";
