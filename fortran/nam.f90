! nam.f90: the Fortran interface of nam (module nam_ckpt), over iso_c_binding and libnam.
!
! Compile it with the program (Fortran modules are specific to their compiler), and link
! libnam:
!   mpifort -c fortran/nam.f90
!   mpifort heat.f90 nam.o $(pkg-config --libs nam)
!
! Calls follow MPI's Fortran style: subroutines whose last argument `ierr` is a nam status
! (NAM_OK = 0, errors negative; nam_status_string(ierr) names it and nam_last_error_message()
! gives the exact cause). Memory passes as type(c_ptr) from c_loc of a `target` variable,
! sizes in bytes as integer(c_size_t) (c_sizeof). Versions, offsets and sizes that are
! uint64_t in C are integer(c_int64_t) here (NAM_CKPT_VERSION_LATEST is -1, UINT64_MAX's bits).
! A name given as '' means the configured checkpoint name. Every call is documented in
! include/nam.h under the C name it wraps.
module nam_ckpt
  use, intrinsic :: iso_c_binding
  implicit none
  private

  !> Status codes used below (every code: include/nam.h).
  integer(c_int), parameter, public :: NAM_OK = 0
  integer(c_int), parameter, public :: NAM_ERR_INVALID_ARGUMENT = -1
  integer(c_int), parameter, public :: NAM_ERR_OUT_OF_BOUNDS = -2
  integer(c_int), parameter, public :: NAM_ERR_FREED = -4

  !> Checkpoint levels (level arguments and results).
  integer(c_int), parameter, public :: NAM_CKPT_LEVEL_SKIPPED = 0
  integer(c_int), parameter, public :: NAM_CKPT_LEVEL_RAM = 1
  integer(c_int), parameter, public :: NAM_CKPT_LEVEL_SSD = 2
  integer(c_int), parameter, public :: NAM_CKPT_LEVEL_PFS = 3
  integer(c_int), parameter, public :: NAM_CKPT_LEVEL_NAM = 4
  !> nam_ckpt_restart's version for the newest restorable one (UINT64_MAX).
  integer(c_int64_t), parameter, public :: NAM_CKPT_VERSION_LATEST = -1_c_int64_t

  !> A client connected to the memory servers of NAM_SERVERS (nam_init / nam_finalize).
  type, public :: nam_client_t
    type(c_ptr) :: ptr = c_null_ptr
  end type nam_client_t

  !> An allocation on a memory server (nam_malloc / nam_free).
  type, public :: nam_alloc_t
    type(c_ptr) :: ptr = c_null_ptr
  end type nam_alloc_t

  !> The checkpoint library of one MPI job (nam_ckpt_init / nam_ckpt_finalize).
  type, public :: nam_ckpt_t
    type(c_ptr) :: ptr = c_null_ptr
  end type nam_ckpt_t

  public :: nam_init, nam_finalize, nam_malloc, nam_free, nam_alloc_size
  public :: nam_put_sync, nam_get_sync, nam_atomic_fetch_add
  public :: nam_status_string, nam_last_error_message
  public :: nam_ckpt_init, nam_ckpt_finalize, nam_ckpt_protect, nam_ckpt_unprotect
  public :: nam_ckpt_checkpoint, nam_ckpt_checkpoint_level, nam_ckpt_snapshot
  public :: nam_ckpt_latest, nam_ckpt_restart
  public :: nam_ckpt_need_checkpoint, nam_ckpt_should_exit, nam_ckpt_checkpoint_descriptor

  interface
    function c_nam_init(config, out) bind(C, name="nam_init") result(s)
      import :: c_ptr, c_int
      type(c_ptr), value :: config
      type(c_ptr), intent(out) :: out
      integer(c_int) :: s
    end function
    function c_nam_finalize(nam) bind(C, name="nam_finalize") result(s)
      import :: c_ptr, c_int
      type(c_ptr), value :: nam
      integer(c_int) :: s
    end function
    function c_nam_malloc(nam, size, params, out) bind(C, name="nam_malloc") result(s)
      import :: c_ptr, c_int, c_int64_t
      type(c_ptr), value :: nam
      integer(c_int64_t), value :: size
      type(c_ptr), value :: params
      type(c_ptr), intent(out) :: out
      integer(c_int) :: s
    end function
    function c_nam_alloc_release(alloc) bind(C, name="nam_alloc_release") result(s)
      import :: c_ptr, c_int
      type(c_ptr), value :: alloc
      integer(c_int) :: s
    end function
    function c_nam_alloc_size(alloc) bind(C, name="nam_alloc_size") result(size)
      import :: c_ptr, c_int64_t
      type(c_ptr), value :: alloc
      integer(c_int64_t) :: size
    end function
    function c_nam_put_sync(alloc, offset, buf, len) bind(C, name="nam_put_sync") result(s)
      import :: c_ptr, c_int, c_int64_t, c_size_t
      type(c_ptr), value :: alloc
      integer(c_int64_t), value :: offset
      type(c_ptr), value :: buf
      integer(c_size_t), value :: len
      integer(c_int) :: s
    end function
    function c_nam_get_sync(alloc, offset, buf, len) bind(C, name="nam_get_sync") result(s)
      import :: c_ptr, c_int, c_int64_t, c_size_t
      type(c_ptr), value :: alloc
      integer(c_int64_t), value :: offset
      type(c_ptr), value :: buf
      integer(c_size_t), value :: len
      integer(c_int) :: s
    end function
    function c_nam_atomic_fetch_add(alloc, offset, value, old) bind(C, name="nam_atomic_fetch_add") result(s)
      import :: c_ptr, c_int, c_int64_t
      type(c_ptr), value :: alloc
      integer(c_int64_t), value :: offset
      integer(c_int64_t), value :: value
      integer(c_int64_t), intent(out) :: old
      integer(c_int) :: s
    end function
    function c_nam_status_string(status) bind(C, name="nam_status_string") result(text)
      import :: c_ptr, c_int
      integer(c_int), value :: status
      type(c_ptr) :: text
    end function
    function c_nam_last_error_message() bind(C, name="nam_last_error_message") result(text)
      import :: c_ptr
      type(c_ptr) :: text
    end function
    function c_strlen(text) bind(C, name="strlen") result(n)
      import :: c_ptr, c_size_t
      type(c_ptr), value :: text
      integer(c_size_t) :: n
    end function
    function c_nam_ckpt_init_fcomm(fcomm, config_path, out) bind(C, name="nam_ckpt_init_fcomm") result(s)
      import :: c_ptr, c_int
      integer(c_int), value :: fcomm
      type(c_ptr), value :: config_path
      type(c_ptr), intent(out) :: out
      integer(c_int) :: s
    end function
    function c_nam_ckpt_protect(ckpt, id, ptr, bytes) bind(C, name="nam_ckpt_protect") result(s)
      import :: c_ptr, c_int, c_size_t
      type(c_ptr), value :: ckpt
      integer(c_int), value :: id
      type(c_ptr), value :: ptr
      integer(c_size_t), value :: bytes
      integer(c_int) :: s
    end function
    function c_nam_ckpt_unprotect(ckpt, id) bind(C, name="nam_ckpt_unprotect") result(s)
      import :: c_ptr, c_int
      type(c_ptr), value :: ckpt
      integer(c_int), value :: id
      integer(c_int) :: s
    end function
    function c_nam_ckpt_checkpoint(ckpt, name, version, level_out) bind(C, name="nam_ckpt_checkpoint") result(s)
      import :: c_ptr, c_int, c_int64_t
      type(c_ptr), value :: ckpt
      type(c_ptr), value :: name
      integer(c_int64_t), value :: version
      integer(c_int), intent(out) :: level_out
      integer(c_int) :: s
    end function
    function c_nam_ckpt_checkpoint_level(ckpt, name, version, level, level_out) &
        bind(C, name="nam_ckpt_checkpoint_level") result(s)
      import :: c_ptr, c_int, c_int64_t
      type(c_ptr), value :: ckpt
      type(c_ptr), value :: name
      integer(c_int64_t), value :: version
      integer(c_int), value :: level
      integer(c_int), intent(out) :: level_out
      integer(c_int) :: s
    end function
    function c_nam_ckpt_snapshot(ckpt, name, version, taken_out, level_out) &
        bind(C, name="nam_ckpt_snapshot") result(s)
      import :: c_ptr, c_int, c_int64_t
      type(c_ptr), value :: ckpt
      type(c_ptr), value :: name
      integer(c_int64_t), value :: version
      integer(c_int), intent(out) :: taken_out
      integer(c_int), intent(out) :: level_out
      integer(c_int) :: s
    end function
    function c_nam_ckpt_need_checkpoint(ckpt, flag_out) bind(C, name="nam_ckpt_need_checkpoint") result(s)
      import :: c_ptr, c_int
      type(c_ptr), value :: ckpt
      integer(c_int), intent(out) :: flag_out
      integer(c_int) :: s
    end function
    function c_nam_ckpt_should_exit(ckpt, flag_out, reason_out, reason_len) &
        bind(C, name="nam_ckpt_should_exit") result(s)
      import :: c_ptr, c_int, c_size_t
      type(c_ptr), value :: ckpt
      integer(c_int), intent(out) :: flag_out
      type(c_ptr), value :: reason_out
      integer(c_size_t), value :: reason_len
      integer(c_int) :: s
    end function
    function c_nam_ckpt_checkpoint_descriptor(ckpt, name, version, descriptor, level_out) &
        bind(C, name="nam_ckpt_checkpoint_descriptor") result(s)
      import :: c_ptr, c_int, c_int64_t
      type(c_ptr), value :: ckpt
      type(c_ptr), value :: name
      integer(c_int64_t), value :: version
      type(c_ptr), value :: descriptor
      integer(c_int), intent(out) :: level_out
      integer(c_int) :: s
    end function
    function c_nam_ckpt_latest(ckpt, name, version_out, found_out) bind(C, name="nam_ckpt_latest") result(s)
      import :: c_ptr, c_int, c_int64_t
      type(c_ptr), value :: ckpt
      type(c_ptr), value :: name
      integer(c_int64_t), intent(out) :: version_out
      integer(c_int), intent(out) :: found_out
      integer(c_int) :: s
    end function
    function c_nam_ckpt_restart(ckpt, name, version, ids, nids, version_out) bind(C, name="nam_ckpt_restart") result(s)
      import :: c_ptr, c_int, c_int64_t, c_size_t
      type(c_ptr), value :: ckpt
      type(c_ptr), value :: name
      integer(c_int64_t), value :: version
      type(c_ptr), value :: ids
      integer(c_size_t), value :: nids
      integer(c_int64_t), intent(out) :: version_out
      integer(c_int) :: s
    end function
    function c_nam_ckpt_finalize(ckpt) bind(C, name="nam_ckpt_finalize") result(s)
      import :: c_ptr, c_int
      type(c_ptr), value :: ckpt
      integer(c_int) :: s
    end function
  end interface

contains

  ! A Fortran string as a NUL-terminated C string (trailing blanks dropped).
  pure function c_string(text) result(out)
    character(len=*), intent(in) :: text
    character(kind=c_char, len=:), allocatable :: out
    out = trim(text) // c_null_char
  end function c_string

  ! A C string owned by libnam, copied into a Fortran string.
  function f_string(text) result(out)
    type(c_ptr), intent(in) :: text
    character(len=:), allocatable :: out
    character(kind=c_char), pointer :: chars(:)
    integer(c_size_t) :: n, i
    n = c_strlen(text)
    call c_f_pointer(text, chars, [n])
    allocate(character(len=n) :: out)
    do i = 1, n
      out(i:i) = chars(i)
    end do
  end function f_string

  !> Connects to the memory servers named by the environment (NAM_SERVERS, NAM_TRANSPORTS,
  !> NAM_TIMEOUT_MS, ...). Release the client with nam_finalize.
  subroutine nam_init(client, ierr)
    type(nam_client_t), intent(out) :: client
    integer(c_int), intent(out) :: ierr
    ierr = c_nam_init(c_null_ptr, client%ptr)
  end subroutine nam_init

  !> Disconnects and destroys the client (its allocations are released with it).
  subroutine nam_finalize(client, ierr)
    type(nam_client_t), intent(inout) :: client
    integer(c_int), intent(out) :: ierr
    ierr = c_nam_finalize(client%ptr)
    client%ptr = c_null_ptr
  end subroutine nam_finalize

  !> Allocates `size` bytes on a memory server (the client chooses which).
  subroutine nam_malloc(client, size, alloc, ierr)
    type(nam_client_t), intent(in) :: client
    integer(c_int64_t), intent(in) :: size
    type(nam_alloc_t), intent(out) :: alloc
    integer(c_int), intent(out) :: ierr
    ierr = c_nam_malloc(client%ptr, size, c_null_ptr, alloc%ptr)
  end subroutine nam_malloc

  !> Frees the allocation and releases its handle (C: nam_alloc_release).
  subroutine nam_free(alloc, ierr)
    type(nam_alloc_t), intent(inout) :: alloc
    integer(c_int), intent(out) :: ierr
    ierr = c_nam_alloc_release(alloc%ptr)
    alloc%ptr = c_null_ptr
  end subroutine nam_free

  !> The allocation's size in bytes (0 for a released handle).
  function nam_alloc_size(alloc) result(size)
    type(nam_alloc_t), intent(in) :: alloc
    integer(c_int64_t) :: size
    size = c_nam_alloc_size(alloc%ptr)
  end function nam_alloc_size

  !> Writes `len` bytes at `buf` to byte `offset` of the allocation, visible to every client
  !> when it returns.
  subroutine nam_put_sync(alloc, offset, buf, len, ierr)
    type(nam_alloc_t), intent(in) :: alloc
    integer(c_int64_t), intent(in) :: offset
    type(c_ptr), intent(in) :: buf
    integer(c_size_t), intent(in) :: len
    integer(c_int), intent(out) :: ierr
    ierr = c_nam_put_sync(alloc%ptr, offset, buf, len)
  end subroutine nam_put_sync

  !> Reads `len` bytes at byte `offset` of the allocation into `buf`.
  subroutine nam_get_sync(alloc, offset, buf, len, ierr)
    type(nam_alloc_t), intent(in) :: alloc
    integer(c_int64_t), intent(in) :: offset
    type(c_ptr), intent(in) :: buf
    integer(c_size_t), intent(in) :: len
    integer(c_int), intent(out) :: ierr
    ierr = c_nam_get_sync(alloc%ptr, offset, buf, len)
  end subroutine nam_get_sync

  !> Atomically adds `value` to the 64-bit word at `offset` (a multiple of 8); `old` gets
  !> its previous value.
  subroutine nam_atomic_fetch_add(alloc, offset, value, old, ierr)
    type(nam_alloc_t), intent(in) :: alloc
    integer(c_int64_t), intent(in) :: offset, value
    integer(c_int64_t), intent(out) :: old
    integer(c_int), intent(out) :: ierr
    ierr = c_nam_atomic_fetch_add(alloc%ptr, offset, value, old)
  end subroutine nam_atomic_fetch_add

  !> The name of a status code ("success", "offset or length out of bounds", ...).
  function nam_status_string(status) result(text)
    integer(c_int), intent(in) :: status
    character(len=:), allocatable :: text
    text = f_string(c_nam_status_string(status))
  end function nam_status_string

  !> The exact cause of this thread's last failed call ("no error" before any).
  function nam_last_error_message() result(text)
    character(len=:), allocatable :: text
    text = f_string(c_nam_last_error_message())
  end function nam_last_error_message

  ! NULL for '' (the configured name), else the name as a C string kept in `buf`.
  function name_ptr(name, buf) result(ptr)
    character(len=*), intent(in) :: name
    character(kind=c_char, len=:), allocatable, target, intent(inout) :: buf
    type(c_ptr) :: ptr
    if (len_trim(name) == 0) then
      ptr = c_null_ptr
    else
      buf = c_string(name)
      ptr = c_loc(buf)
    end if
  end function name_ptr

  !> Collective over `comm` (an MPI Fortran communicator handle; with mpi_f08 pass
  !> comm%MPI_VAL): reads the configuration (`config_path`, else NAM_CKPT_CONFIG, else
  !> defaults; NAM_CKPT_* variables override it) and sets up the levels and the L2 scheme.
  subroutine nam_ckpt_init(comm, ckpt, ierr, config_path)
    integer, intent(in) :: comm
    type(nam_ckpt_t), intent(out) :: ckpt
    integer(c_int), intent(out) :: ierr
    character(len=*), intent(in), optional :: config_path
    character(kind=c_char, len=:), allocatable, target :: path
    if (present(config_path)) then
      path = c_string(config_path)
      ierr = c_nam_ckpt_init_fcomm(int(comm, c_int), c_loc(path), ckpt%ptr)
    else
      ierr = c_nam_ckpt_init_fcomm(int(comm, c_int), c_null_ptr, ckpt%ptr)
    end if
  end subroutine nam_ckpt_init

  !> Protects `bytes` bytes at `ptr` (c_loc of a `target` variable, which must stay where it
  !> is until it is unprotected or the library finalized) under `id`. Not collective.
  subroutine nam_ckpt_protect(ckpt, id, ptr, bytes, ierr)
    type(nam_ckpt_t), intent(in) :: ckpt
    integer, intent(in) :: id
    type(c_ptr), intent(in) :: ptr
    integer(c_size_t), intent(in) :: bytes
    integer(c_int), intent(out) :: ierr
    ierr = c_nam_ckpt_protect(ckpt%ptr, int(id, c_int), ptr, bytes)
  end subroutine nam_ckpt_protect

  !> Stops protecting `id`.
  subroutine nam_ckpt_unprotect(ckpt, id, ierr)
    type(nam_ckpt_t), intent(in) :: ckpt
    integer, intent(in) :: id
    integer(c_int), intent(out) :: ierr
    ierr = c_nam_ckpt_unprotect(ckpt%ptr, int(id, c_int))
  end subroutine nam_ckpt_unprotect

  !> Collective: checkpoints the protected regions as `version` of `name` at the level the
  !> placement policy picks; `level` (optional) gets it (NAM_CKPT_LEVEL_*).
  subroutine nam_ckpt_checkpoint(ckpt, name, version, ierr, level)
    type(nam_ckpt_t), intent(in) :: ckpt
    character(len=*), intent(in) :: name
    integer(c_int64_t), intent(in) :: version
    integer(c_int), intent(out) :: ierr
    integer(c_int), intent(out), optional :: level
    character(kind=c_char, len=:), allocatable, target :: buf
    integer(c_int) :: got
    ierr = c_nam_ckpt_checkpoint(ckpt%ptr, name_ptr(name, buf), version, got)
    if (present(level)) level = got
  end subroutine nam_ckpt_checkpoint

  !> Collective: checkpoints at `level` chosen for this call (NAM_CKPT_LEVEL_RAM, _SSD or
  !> _PFS; FTI_Checkpoint(id, level) style), the same on every rank.
  subroutine nam_ckpt_checkpoint_level(ckpt, name, version, level, ierr, level_out)
    type(nam_ckpt_t), intent(in) :: ckpt
    character(len=*), intent(in) :: name
    integer(c_int64_t), intent(in) :: version
    integer(c_int), intent(in) :: level
    integer(c_int), intent(out) :: ierr
    integer(c_int), intent(out), optional :: level_out
    character(kind=c_char, len=:), allocatable, target :: buf
    integer(c_int) :: got
    ierr = c_nam_ckpt_checkpoint_level(ckpt%ptr, name_ptr(name, buf), version, level, got)
    if (present(level_out)) level_out = got
  end subroutine nam_ckpt_checkpoint_level

  !> Collective, to call every iteration (FTI_Snapshot style): checkpoints when
  !> snapshot.interval seconds have passed since init or the last checkpoint; `taken`
  !> (optional) tells whether it did, `level` (optional) where it went.
  subroutine nam_ckpt_snapshot(ckpt, name, version, ierr, taken, level)
    type(nam_ckpt_t), intent(in) :: ckpt
    character(len=*), intent(in) :: name
    integer(c_int64_t), intent(in) :: version
    integer(c_int), intent(out) :: ierr
    logical, intent(out), optional :: taken
    integer(c_int), intent(out), optional :: level
    character(kind=c_char, len=:), allocatable, target :: buf
    integer(c_int) :: got_taken, got_level
    ierr = c_nam_ckpt_snapshot(ckpt%ptr, name_ptr(name, buf), version, got_taken, got_level)
    if (present(taken)) taken = got_taken /= 0
    if (present(level)) level = got_level
  end subroutine nam_ckpt_snapshot

  !> Collective: `found` and `version` of the newest version of `name` a restart can
  !> restore. Not found with ierr = NAM_OK: none was ever written; with an error: versions
  !> were written but none can be restored (nam_last_error_message says what is missing).
  subroutine nam_ckpt_latest(ckpt, name, version, found, ierr)
    type(nam_ckpt_t), intent(in) :: ckpt
    character(len=*), intent(in) :: name
    integer(c_int64_t), intent(out) :: version
    logical, intent(out) :: found
    integer(c_int), intent(out) :: ierr
    character(kind=c_char, len=:), allocatable, target :: buf
    integer(c_int) :: got
    ierr = c_nam_ckpt_latest(ckpt%ptr, name_ptr(name, buf), version, got)
    found = got /= 0
  end subroutine nam_ckpt_latest

  !> Collective: restores `version` of `name` (NAM_CKPT_VERSION_LATEST: the newest
  !> restorable) into every protected region, rebuilding lost ranks with the L2 scheme;
  !> `restored` (optional) gets the version restored.
  subroutine nam_ckpt_restart(ckpt, name, version, ierr, restored)
    type(nam_ckpt_t), intent(in) :: ckpt
    character(len=*), intent(in) :: name
    integer(c_int64_t), intent(in) :: version
    integer(c_int), intent(out) :: ierr
    integer(c_int64_t), intent(out), optional :: restored
    character(kind=c_char, len=:), allocatable, target :: buf
    integer(c_int64_t) :: got
    ierr = c_nam_ckpt_restart(ckpt%ptr, name_ptr(name, buf), version, c_null_ptr, 0_c_size_t, got)
    if (present(restored)) restored = got
  end subroutine nam_ckpt_restart

  !> Collective, to call every iteration (SCR_Need_checkpoint): `need` is true when it is time
  !> to checkpoint (runloop.interval or runloop.overhead; always when neither is set).
  subroutine nam_ckpt_need_checkpoint(ckpt, need, ierr)
    type(nam_ckpt_t), intent(in) :: ckpt
    logical, intent(out) :: need
    integer(c_int), intent(out) :: ierr
    integer(c_int) :: got
    ierr = c_nam_ckpt_need_checkpoint(ckpt%ptr, got)
    need = got /= 0
  end subroutine nam_ckpt_need_checkpoint

  !> Collective, to call every iteration (SCR_Should_exit): `stop` is true when the job should
  !> stop now (a halt file from `nam ckpt halt DIR`, or the allocation's end); `reason`
  !> (optional) gets why, cut to its length.
  subroutine nam_ckpt_should_exit(ckpt, stop, ierr, reason)
    type(nam_ckpt_t), intent(in) :: ckpt
    logical, intent(out) :: stop
    integer(c_int), intent(out) :: ierr
    character(len=*), intent(out), optional :: reason
    character(kind=c_char, len=512), target :: buf
    integer(c_int) :: got
    integer :: n
    buf = c_null_char
    ierr = c_nam_ckpt_should_exit(ckpt%ptr, got, c_loc(buf), int(len(buf), c_size_t))
    stop = got /= 0
    if (present(reason)) then
      n = index(buf, c_null_char) - 1
      if (n < 0) n = len(buf)
      reason = buf(1:n)
    end if
  end subroutine nam_ckpt_should_exit

  !> Collective: a checkpoint protected by the redundancy descriptor `descriptor` (a
  !> [descriptors.<name>] table, or "default"); `level_out` (optional) where it went.
  subroutine nam_ckpt_checkpoint_descriptor(ckpt, name, version, descriptor, ierr, level_out)
    type(nam_ckpt_t), intent(in) :: ckpt
    character(len=*), intent(in) :: name, descriptor
    integer(c_int64_t), intent(in) :: version
    integer(c_int), intent(out) :: ierr
    integer(c_int), intent(out), optional :: level_out
    character(kind=c_char, len=:), allocatable, target :: buf, dbuf
    integer(c_int) :: got
    ierr = c_nam_ckpt_checkpoint_descriptor(ckpt%ptr, name_ptr(name, buf), version, name_ptr(descriptor, dbuf), got)
    if (present(level_out)) level_out = got
  end subroutine nam_ckpt_checkpoint_descriptor

  !> Collective: waits for outstanding flushes and frees the library's handle.
  subroutine nam_ckpt_finalize(ckpt, ierr)
    type(nam_ckpt_t), intent(inout) :: ckpt
    integer(c_int), intent(out) :: ierr
    ierr = c_nam_ckpt_finalize(ckpt%ptr)
    ckpt%ptr = c_null_ptr
  end subroutine nam_ckpt_finalize

end module nam_ckpt
