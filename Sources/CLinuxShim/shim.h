// Linux interfaces that Glibc's Swift overlay does not expose: epoll, eventfd,
// accept4 and writev. Header only; everything here lives in libc.
#pragma once
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/resource.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <errno.h>

extern int accept4(int sockfd, struct sockaddr *addr, socklen_t *addrlen, int flags);

static inline int tally_errno(void) { return errno; }
