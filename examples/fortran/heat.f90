! heat.f90: a 2-D heat stencil (Jacobi iteration on an NX x NY plate, hot top edge) in MPI
! Fortran that checkpoints through the nam checkpoint library (module nam_ckpt) and restarts
! after a failure.
!
!   make && mpirun -np 4 ./heat [steps] [checkpoint_every] [fail_rank] [fail_after_step]
!
! The plate is split into blocks of rows, one per rank, each with a halo row above and below
! exchanged every step. The rank's rows and the step counter are protected regions. On start
! the program asks nam_ckpt_latest for a restorable version and, if there is one, restarts
! from it: running it again after a failure continues from the last checkpoint, even when a
! rank's checkpoint files are gone (the L2 scheme rebuilds them). `fail_rank` kills itself
! (SIGKILL) after step `fail_after_step`, as a crashed node would.
!
! Configuration: NAM_CKPT_CONFIG (a TOML file) and NAM_CKPT_* variables (docs/checkpoint.md).
! The last line rank 0 prints is the answer, the same whether or not the run was interrupted:
!   final step=<steps> checksum=<sum of every cell, rank by rank>
program heat
  use, intrinsic :: iso_c_binding
  use mpi
  use nam_ckpt
  implicit none

  integer, parameter :: NX = 256, NY = 256
  interface
    function c_raise(sig) bind(C, name="raise") result(r)
      import :: c_int
      integer(c_int), value :: sig
      integer(c_int) :: r
    end function
  end interface

  integer :: rank, nranks, rows, first_row, ierr, fail_rank, r
  integer(c_int) :: status, level
  integer(c_int64_t) :: steps, every, fail_after, version
  integer(c_int64_t), target :: done
  real(c_double), allocatable, target :: grid(:, :), next(:, :)
  real(c_double) :: local_sum
  real(c_double), allocatable :: sums(:)
  logical :: found
  type(nam_ckpt_t) :: ckpt
  character(len=32) :: arg

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  steps = int_arg(1, 200_c_int64_t)
  every = int_arg(2, 20_c_int64_t)
  fail_rank = int(int_arg(3, -1_c_int64_t))
  fail_after = int_arg(4, -1_c_int64_t)

  rows = NY / nranks
  if (rank < mod(NY, nranks)) rows = rows + 1
  first_row = rank * (NY / nranks) + min(rank, mod(NY, nranks))
  ! Columns 1..NX, rows 0..rows+1 (0 and rows+1 are the halos): a row is contiguous.
  allocate(grid(NX, 0:rows + 1), next(NX, 0:rows + 1))
  grid = 0.0_c_double
  next = 0.0_c_double
  done = 0
  if (first_row == 0) grid(:, 1) = 100.0_c_double

  call nam_ckpt_init(MPI_COMM_WORLD, ckpt, status)
  call check(status, "nam_ckpt_init")
  call nam_ckpt_protect(ckpt, 1, c_loc(grid), size(grid, kind=c_size_t) * c_sizeof(grid(1, 0)), status)
  call check(status, "nam_ckpt_protect(grid)")
  call nam_ckpt_protect(ckpt, 2, c_loc(done), c_sizeof(done), status)
  call check(status, "nam_ckpt_protect(step)")

  call nam_ckpt_latest(ckpt, "heat", version, found, status)
  call check(status, "nam_ckpt_latest")
  if (found) then
    call nam_ckpt_restart(ckpt, "heat", NAM_CKPT_VERSION_LATEST, status, version)
    call check(status, "nam_ckpt_restart")
    if (rank == 0) print '(a, i0, a, i0)', "restarted from version ", version, " at step ", done
  end if

  do while (done < steps)
    call exchange_halos()
    call jacobi()
    grid(:, 1:rows) = next(:, 1:rows)
    done = done + 1
    if (mod(done, every) == 0) then
      call nam_ckpt_checkpoint(ckpt, "heat", done, status, level)
      call check(status, "nam_ckpt_checkpoint")
      if (rank == 0) print '(a, i0, a, i0)', "checkpoint step=", done, " level=", level
    end if
    if (rank == fail_rank .and. done == fail_after) then
      write (0, '(a, i0, a, i0)') "rank ", rank, ": failing after step ", fail_after
      flush (0)
      r = c_raise(9_c_int)
    end if
  end do

  local_sum = sum(grid(:, 1:rows))
  allocate(sums(nranks))
  call MPI_Gather(local_sum, 1, MPI_DOUBLE_PRECISION, sums, 1, MPI_DOUBLE_PRECISION, 0, MPI_COMM_WORLD, ierr)
  if (rank == 0) print '(a, i0, a, es24.16)', "final step=", done, " checksum=", sum(sums)
  call nam_ckpt_finalize(ckpt, status)
  call check(status, "nam_ckpt_finalize")
  call MPI_Finalize(ierr)

contains

  ! The n-th command-line argument as an integer, or `default`.
  function int_arg(n, default) result(value)
    integer, intent(in) :: n
    integer(c_int64_t), intent(in) :: default
    integer(c_int64_t) :: value
    if (command_argument_count() < n) then
      value = default
    else
      call get_command_argument(n, arg)
      read (arg, *) value
    end if
  end function int_arg

  subroutine check(s, what)
    integer(c_int), intent(in) :: s
    character(len=*), intent(in) :: what
    if (s /= NAM_OK) then
      write (0, '(a, i0, 6a)') "rank ", rank, ": ", what, " failed: ", nam_status_string(s), ": ", &
        nam_last_error_message()
      call MPI_Abort(MPI_COMM_WORLD, 2, ierr)
    end if
  end subroutine check

  subroutine exchange_halos()
    integer :: up, down
    up = merge(rank - 1, MPI_PROC_NULL, rank > 0)
    down = merge(rank + 1, MPI_PROC_NULL, rank < nranks - 1)
    call MPI_Sendrecv(grid(:, 1), NX, MPI_DOUBLE_PRECISION, up, 0, grid(:, rows + 1), NX, &
      MPI_DOUBLE_PRECISION, down, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
    call MPI_Sendrecv(grid(:, rows), NX, MPI_DOUBLE_PRECISION, down, 1, grid(:, 0), NX, &
      MPI_DOUBLE_PRECISION, up, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
  end subroutine exchange_halos

  ! One Jacobi step on the rank's rows; the plate's edges stay fixed.
  subroutine jacobi()
    integer :: i, j, global
    do j = 1, rows
      global = first_row + j - 1
      do i = 1, NX
        if (global == 0 .or. global == NY - 1 .or. i == 1 .or. i == NX) then
          next(i, j) = grid(i, j)
        else
          next(i, j) = 0.25_c_double * (grid(i, j - 1) + grid(i, j + 1) + grid(i - 1, j) + grid(i + 1, j))
        end if
      end do
    end do
  end subroutine jacobi

end program heat
