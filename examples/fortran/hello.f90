! hello.f90: the core client calls of nam from Fortran (module nam_ckpt): connect to the
! memory servers of NAM_SERVERS, allocate, put and get an array, count with a remote
! fetch-and-add, see an out-of-bounds put refused, free, finalize.
!
!   make && NAM_SERVERS=127.0.0.1:7000 ./hello
!
! Every check prints "ok ..." or "FAIL ..."; the last line is "hello: all checks passed".
program hello
  use, intrinsic :: iso_c_binding
  use nam_ckpt
  implicit none

  integer, parameter :: N = 1024
  type(nam_client_t) :: nam
  type(nam_alloc_t) :: alloc
  integer(c_int) :: status
  integer(c_int64_t), target :: sent(N), received(N)
  integer(c_int64_t) :: old, i
  logical :: all_ok = .true.

  call nam_init(nam, status)
  call expect(status, NAM_OK, "nam_init")
  if (status /= NAM_OK) stop 1
  call nam_malloc(nam, int(c_sizeof(sent), c_int64_t) + 8, alloc, status)
  call expect(status, NAM_OK, "nam_malloc")
  if (status /= NAM_OK) stop 1
  print '(a, i0, a)', "ok   nam_malloc ", nam_alloc_size(alloc), " bytes"

  sent = [(i * i, i = 1, N)]
  received = 0
  call nam_put_sync(alloc, 0_c_int64_t, c_loc(sent), c_sizeof(sent), status)
  call expect(status, NAM_OK, "nam_put_sync")
  call nam_get_sync(alloc, 0_c_int64_t, c_loc(received), c_sizeof(received), status)
  call expect(status, NAM_OK, "nam_get_sync")
  if (all(received == sent)) then
    print '(a)', "ok   the array came back intact"
  else
    print '(a)', "FAIL the array came back changed"
    all_ok = .false.
  end if

  ! The counter is the word after the array.
  do i = 1, 3
    call nam_atomic_fetch_add(alloc, int(c_sizeof(sent), c_int64_t), 5_c_int64_t, old, status)
    call expect(status, NAM_OK, "nam_atomic_fetch_add")
  end do
  if (old == 10) then
    print '(a)', "ok   fetch_add counted 0, 5, 10"
  else
    print '(a, i0)', "FAIL fetch_add's third old value is ", old
    all_ok = .false.
  end if

  call nam_put_sync(alloc, nam_alloc_size(alloc) - 4, c_loc(sent), 8_c_size_t, status)
  call expect(status, NAM_ERR_OUT_OF_BOUNDS, "nam_put_sync past the end")
  print '(2a)', "ok   refused: ", nam_last_error_message()

  call nam_free(alloc, status)
  call expect(status, NAM_OK, "nam_free")
  call nam_finalize(nam, status)
  call expect(status, NAM_OK, "nam_finalize")
  if (.not. all_ok) stop 1
  print '(a)', "hello: all checks passed"

contains

  subroutine expect(got, want, what)
    integer(c_int), intent(in) :: got, want
    character(len=*), intent(in) :: what
    if (got /= want) then
      print '(5a)', "FAIL ", what, ": ", nam_status_string(got), ": " // nam_last_error_message()
      all_ok = .false.
    end if
  end subroutine expect

end program hello
