! ckpt_runloop.f90: the run loop of module nam_ckpt, driven by tests/fortran_runloop.rs under
! mpirun. `loop`: checkpoint when nam_ckpt_need_checkpoint says so; when nam_ckpt_should_exit
! says stop, a last checkpoint with the `xor` descriptor, then stop. `restart`: restore the
! newest restorable version and check every element of the rank's array.
program ckpt_runloop
  use, intrinsic :: iso_c_binding
  use mpi
  use nam_ckpt
  implicit none

  integer, parameter :: N = 4096
  integer(c_int64_t), target :: data(N)
  integer :: rank, ierr, i, bad, all_bad
  integer(c_int) :: status, level
  integer(c_int64_t) :: step, version
  logical :: need, stop, found
  character(len=256) :: why
  character(len=16) :: mode
  type(nam_ckpt_t) :: ckpt

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call get_command_argument(1, mode)
  call nam_ckpt_init(MPI_COMM_WORLD, ckpt, status)
  call check(status, "nam_ckpt_init")
  call nam_ckpt_protect(ckpt, 1, c_loc(data), c_sizeof(data), status)
  call check(status, "nam_ckpt_protect")
  if (mode == "loop") then
    do step = 1, 2000
      call fill(step)
      call sleep_ms(10)
      call nam_ckpt_need_checkpoint(ckpt, need, status)
      call check(status, "nam_ckpt_need_checkpoint")
      if (need) then
        call nam_ckpt_checkpoint(ckpt, "floop", step, status)
        call check(status, "nam_ckpt_checkpoint")
      end if
      call nam_ckpt_should_exit(ckpt, stop, status, why)
      call check(status, "nam_ckpt_should_exit")
      if (stop) then
        call nam_ckpt_checkpoint_descriptor(ckpt, "floop", step + 1000, "xor", status, level)
        call check(status, "nam_ckpt_checkpoint_descriptor")
        if (rank == 0) print '(a, i0, a, i0, 2a)', "stopping at step ", step, " level ", level, ": ", trim(why)
        exit
      end if
    end do
  else
    call nam_ckpt_latest(ckpt, "floop", version, found, status)
    call check(status, "nam_ckpt_latest")
    data = 0
    call nam_ckpt_restart(ckpt, "floop", NAM_CKPT_VERSION_LATEST, status, version)
    call check(status, "nam_ckpt_restart")
    bad = 0
    do i = 1, N
      if (data(i) /= expected(mod(version, 1000_c_int64_t), i)) bad = bad + 1
    end do
    call MPI_Allreduce(bad, all_bad, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
    if (rank == 0) print '(a, i0, a, i0)', "restored ", version, " wrong=", all_bad
  end if
  call nam_ckpt_finalize(ckpt, status)
  call check(status, "nam_ckpt_finalize")
  call MPI_Finalize(ierr)

contains

  pure function expected(v, i) result(x)
    integer(c_int64_t), intent(in) :: v
    integer, intent(in) :: i
    integer(c_int64_t) :: x
    x = int(rank, c_int64_t) * 1000000000_c_int64_t + v * 100000_c_int64_t + int(i, c_int64_t)
  end function expected

  subroutine fill(v)
    integer(c_int64_t), intent(in) :: v
    integer :: j
    do j = 1, N
      data(j) = expected(v, j)
    end do
  end subroutine fill

  subroutine sleep_ms(ms)
    integer, intent(in) :: ms
    real(c_double) :: t0
    t0 = MPI_Wtime()
    do while (MPI_Wtime() - t0 < ms / 1000.0_c_double)
    end do
  end subroutine sleep_ms

  subroutine check(s, what)
    integer(c_int), intent(in) :: s
    character(len=*), intent(in) :: what
    integer :: e
    if (s /= NAM_OK) then
      print '(4a)', what, ": ", trim(nam_last_error_message()), ""
      call MPI_Abort(MPI_COMM_WORLD, 1, e)
    end if
  end subroutine check
end program ckpt_runloop
