/*
 * dp_tcp.c - ranks started by a launcher (data_parallel.h): joining over
 * TCP at MASTER_ADDR:MASTER_PORT, and the star through rank 0 that carries
 * the barrier, the scalar sums, broadcasts and the CPU ranks' gradients.
 *
 * Every exchange has a size both sides know from the call, so the stream
 * carries no headers; a peer that closes its socket, or says nothing for
 * g->timeout_s seconds, is an error naming its rank.
 */
#define _POSIX_C_SOURCE 200809L
#include "train/dp_tcp.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

enum { HELLO_MAGIC = 0x42503844, /* "BP8D" */ CHUNK_FLOATS = 1 << 18 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Wait for fd to be readable (POLLIN) or writable (POLLOUT) until deadline. */
static bfp8_status wait_for(int fd, short events, double deadline, double timeout_s, int peer, const char *what) {
    for (;;) {
        const double left = deadline - now_s();
        if (left <= 0)
            return bfp8_fail(BFP8_ERR_IO, "data parallel: no progress with rank %d for %.0f s while %s "
                                          "(BLOCKFP8_DP_TIMEOUT)", peer, timeout_s, what);
        struct pollfd p = {.fd = fd, .events = events};
        const int ready = poll(&p, 1, left > 1e6 ? 1000000000 : (int)(left * 1000.0) + 1);
        if (ready > 0) return BFP8_OK;
        if (ready < 0 && errno != EINTR)
            return bfp8_fail(BFP8_ERR_IO, "data parallel: poll (rank %d): %s", peer, strerror(errno));
    }
}

static bfp8_status peer_gone(int peer, int err) {
    return bfp8_fail(BFP8_ERR_IO, "data parallel: rank %d closed its connection (it exited or failed)%s%s", peer,
                     err ? ": " : "", err ? strerror(err) : "");
}

static bfp8_status send_all(const dp_group *g, int fd, const void *data, size_t bytes, int peer) {
    const char *p = data;
    const double deadline = now_s() + g->timeout_s;
    while (bytes > 0) {
        BFP8_TRY(wait_for(fd, POLLOUT, deadline, g->timeout_s, peer, "sending to it"));
        const ssize_t sent = send(fd, p, bytes, MSG_NOSIGNAL);
        if (sent < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
            return peer_gone(peer, errno);
        }
        p += sent;
        bytes -= (size_t)sent;
    }
    return BFP8_OK;
}

static bfp8_status recv_all(const dp_group *g, int fd, void *data, size_t bytes, int peer) {
    char *p = data;
    const double deadline = now_s() + g->timeout_s;
    while (bytes > 0) {
        BFP8_TRY(wait_for(fd, POLLIN, deadline, g->timeout_s, peer, "waiting for it"));
        const ssize_t got = recv(fd, p, bytes, 0);
        if (got == 0) return peer_gone(peer, 0);
        if (got < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
            return peer_gone(peer, errno);
        }
        p += got;
        bytes -= (size_t)got;
    }
    return BFP8_OK;
}

/* The socket that leads to rank 0 (a rank other than 0) or to rank r (rank 0). */
static int to_root(const dp_group *g) { return g->peers[0]; }

/* ------------------------------------------------------------------------ */
/* The environment and the meeting                                           */

static int env_int(const char *name, long min, long max, long *value) {
    const char *text = getenv(name);
    if (!text || !*text) return 0;
    char *end;
    errno = 0;
    const long v = strtol(text, &end, 10);
    if (*end || errno || v < min || v > max) return -1;
    *value = v;
    return 1;
}

int dp_environment_present(void) {
    const int rank = getenv("RANK") != NULL, world = getenv("WORLD_SIZE") != NULL;
    if (rank != world) {
        bfp8_fail(BFP8_ERR_INVALID_VALUE, "a launcher sets both RANK and WORLD_SIZE; only %s is set",
                  rank ? "RANK" : "WORLD_SIZE");
        return -1;
    }
    return rank;
}

static void set_socket_options(int fd) {
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Rank 0: listen on the port, take world - 1 connections, each saying who it is. */
static bfp8_status accept_peers(dp_group *g, const char *port, double deadline) {
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *ai;
    int err = getaddrinfo(NULL, port, &hints, &ai);
    if (err) return bfp8_fail(BFP8_ERR_IO, "data parallel: MASTER_PORT '%s': %s", port, gai_strerror(err));
    const int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    const int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, g->world) != 0) {
        err = errno;
        freeaddrinfo(ai);
        if (fd >= 0) close(fd);
        return bfp8_fail(BFP8_ERR_IO, "data parallel: rank 0 cannot listen on port %s: %s (another port: "
                                      "BLOCKFP8_DP_PORT)", port, strerror(err));
    }
    freeaddrinfo(ai);
    bfp8_status st = BFP8_OK;
    for (int joined = 1; joined < g->world && st == BFP8_OK;) {
        const double left = deadline - now_s();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)(left * 1000.0) + 1) == 0) {
            st = bfp8_fail(BFP8_ERR_IO, "data parallel: rank 0: %d of %d ranks joined before the timeout",
                           joined, g->world);
            break;
        }
        const int peer = accept(fd, NULL, NULL);
        if (peer < 0) continue; /* EINTR, or a connection that went away */
        set_socket_options(peer);
        uint32_t hello[3];
        const dp_group any_wait = {.timeout_s = left};
        if (recv_all(&any_wait, peer, hello, sizeof hello, -1) != BFP8_OK || hello[0] != HELLO_MAGIC) {
            close(peer); /* not one of ours */
            continue;
        }
        const int r = (int)hello[1];
        if ((int)hello[2] != g->world || r < 1 || r >= g->world || g->peers[r] >= 0) {
            close(peer);
            st = bfp8_fail(BFP8_ERR_INVALID_VALUE, "data parallel: a process joined as rank %d of %u; this run "
                                                   "has WORLD_SIZE %d%s", r, hello[2], g->world,
                           r >= 1 && r < g->world && g->peers[r] >= 0 ? " and a rank that number already" : "");
            break;
        }
        g->peers[r] = peer;
        ++joined;
    }
    close(fd);
    const uint32_t welcome[2] = {HELLO_MAGIC, (uint32_t)g->world};
    for (int r = 1; r < g->world && st == BFP8_OK; ++r) st = send_all(g, g->peers[r], welcome, sizeof welcome, r);
    return st;
}

/* Another rank: connect to rank 0 (which may not listen yet), say who we are, wait for everyone. */
static bfp8_status connect_to_root(dp_group *g, const char *addr, const char *port, double deadline) {
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai;
    const int err = getaddrinfo(addr, port, &hints, &ai);
    if (err)
        return bfp8_fail(BFP8_ERR_IO, "data parallel: MASTER_ADDR '%s' port '%s': %s", addr, port, gai_strerror(err));
    int fd = -1, last_err = 0;
    while (now_s() < deadline) {
        fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
        last_err = errno;
        if (fd >= 0) close(fd);
        fd = -1;
        const struct timespec pause = {0, 100 * 1000000L};
        nanosleep(&pause, NULL);
    }
    freeaddrinfo(ai);
    if (fd < 0)
        return bfp8_fail(BFP8_ERR_IO, "data parallel: rank %d cannot reach rank 0 at %s:%s before the timeout: %s",
                         g->rank, addr, port, strerror(last_err));
    set_socket_options(fd);
    g->peers[0] = fd;
    const uint32_t hello[3] = {HELLO_MAGIC, (uint32_t)g->rank, (uint32_t)g->world};
    BFP8_TRY(send_all(g, fd, hello, sizeof hello, 0));
    uint32_t welcome[2];
    const dp_group until = {.timeout_s = deadline - now_s() > 1 ? deadline - now_s() : 1};
    BFP8_TRY(recv_all(&until, fd, welcome, sizeof welcome, 0));
    if (welcome[0] != HELLO_MAGIC || welcome[1] != (uint32_t)g->world)
        return bfp8_fail(BFP8_ERR_IO, "data parallel: rank 0 at %s:%s is not a run of %d ranks", addr, port,
                         g->world);
    return BFP8_OK;
}

bfp8_status dp_join_environment(dp_group *g) {
    memset(g, 0, sizeof *g);
    g->slots_fd = -1;
    long rank, world, local = -1, local_world = -1, timeout = 900, port_number = 29500;
    if (env_int("RANK", 0, DP_MAX_RANKS - 1, &rank) != 1 || env_int("WORLD_SIZE", 1, DP_MAX_RANKS, &world) != 1 ||
        rank >= world)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "RANK '%s' and WORLD_SIZE '%s': a rank 0 <= RANK < WORLD_SIZE "
                                                 "<= %d", getenv("RANK"), getenv("WORLD_SIZE"), DP_MAX_RANKS);
    if (env_int("LOCAL_RANK", 0, DP_MAX_RANKS - 1, &local) < 0)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "LOCAL_RANK '%s': a number from 0 to %d", getenv("LOCAL_RANK"),
                         DP_MAX_RANKS - 1);
    if (env_int("LOCAL_WORLD_SIZE", 1, DP_MAX_RANKS, &local_world) < 0)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "LOCAL_WORLD_SIZE '%s': a number from 1 to %d",
                         getenv("LOCAL_WORLD_SIZE"), DP_MAX_RANKS);
    if (env_int("MASTER_PORT", 1, 65535, &port_number) < 0)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "MASTER_PORT '%s': a port from 1 to 65535", getenv("MASTER_PORT"));
    /* torchrun's agent keeps a store of its own listening on MASTER_PORT, and says so */
    const char *agent_store = getenv("TORCHELASTIC_USE_AGENT_STORE");
    if (agent_store && (strcmp(agent_store, "True") == 0 || strcmp(agent_store, "1") == 0) && port_number < 65535)
        ++port_number;
    if (env_int("BLOCKFP8_DP_PORT", 1, 65535, &port_number) < 0)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "BLOCKFP8_DP_PORT '%s': a port from 1 to 65535",
                         getenv("BLOCKFP8_DP_PORT"));
    if (env_int("BLOCKFP8_DP_TIMEOUT", 1, 86400 * 7, &timeout) < 0)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "BLOCKFP8_DP_TIMEOUT '%s': seconds, 1 or more",
                         getenv("BLOCKFP8_DP_TIMEOUT"));
    const char *addr = getenv("MASTER_ADDR") && *getenv("MASTER_ADDR") ? getenv("MASTER_ADDR") : "127.0.0.1";
    char port[16];
    snprintf(port, sizeof port, "%ld", port_number);
    g->rank = (int)rank;
    g->world = (int)world;
    g->local_rank = local >= 0 ? (int)local : (int)rank;
    g->local_world = local_world > 0 ? (int)local_world : (int)world;
    g->timeout_s = (double)timeout;
    const int sockets = rank == 0 ? (int)world : 1;
    g->peers = malloc((size_t)sockets * sizeof *g->peers);
    if (!g->peers) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "data parallel: out of memory");
    for (int i = 0; i < sockets; ++i) g->peers[i] = -1;
    if (world == 1) return BFP8_OK;
    const double deadline = now_s() + g->timeout_s;
    bfp8_status st = rank == 0 ? accept_peers(g, port, deadline) : connect_to_root(g, addr, port, deadline);
    if (st != BFP8_OK) dp_tcp_close(g);
    return st;
}

void dp_tcp_close(dp_group *g) {
    if (!g->peers) return;
    const int sockets = g->rank == 0 ? g->world : 1;
    for (int i = 0; i < sockets; ++i)
        if (g->peers[i] >= 0) close(g->peers[i]);
    free(g->peers);
    g->peers = NULL;
    free(g->net_buffer);
    g->net_buffer = NULL;
}

/* ------------------------------------------------------------------------ */
/* Exchanges                                                                 */

bfp8_status dp_tcp_broadcast(dp_group *g, void *data, size_t bytes) {
    if (g->rank != 0) return recv_all(g, to_root(g), data, bytes, 0);
    for (int r = 1; r < g->world; ++r) BFP8_TRY(send_all(g, g->peers[r], data, bytes, r));
    return BFP8_OK;
}

bfp8_status dp_tcp_barrier(dp_group *g) {
    char token = 1;
    if (g->rank != 0) {
        BFP8_TRY(send_all(g, to_root(g), &token, 1, 0));
        return recv_all(g, to_root(g), &token, 1, 0);
    }
    for (int r = 1; r < g->world; ++r) BFP8_TRY(recv_all(g, g->peers[r], &token, 1, r));
    return dp_tcp_broadcast(g, &token, 1);
}

bfp8_status dp_tcp_sum_scalars(dp_group *g, double *v, int n) {
    const size_t bytes = (size_t)n * sizeof *v;
    if (g->rank != 0) {
        BFP8_TRY(send_all(g, to_root(g), v, bytes, 0));
        return recv_all(g, to_root(g), v, bytes, 0);
    }
    double sum[DP_MAX_SCALARS], theirs[DP_MAX_SCALARS];
    for (int i = 0; i < n; ++i) sum[i] = 0.0 + v[i]; /* the shared-memory sum starts from 0.0 too */
    for (int r = 1; r < g->world; ++r) {
        BFP8_TRY(recv_all(g, g->peers[r], theirs, bytes, r));
        for (int i = 0; i < n; ++i) sum[i] += theirs[i];
    }
    memcpy(v, sum, bytes);
    return dp_tcp_broadcast(g, v, bytes);
}

/* Rank 0: data := the rank-ordered sum of the ranks' data over world, a
 * chunk at a time (every rank sends all of its data before it reads). */
static bfp8_status root_reduce_mean(dp_group *g, float *data, size_t n) {
    if (!g->net_buffer && !(g->net_buffer = malloc(CHUNK_FLOATS * sizeof *g->net_buffer)))
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "data parallel: out of memory");
    const float world = (float)g->world;
    for (size_t a = 0; a < n; a += CHUNK_FLOATS) {
        const size_t count = n - a < CHUNK_FLOATS ? n - a : CHUNK_FLOATS;
        for (int r = 1; r < g->world; ++r) {
            BFP8_TRY(recv_all(g, g->peers[r], g->net_buffer, count * sizeof *data, r));
            for (size_t i = 0; i < count; ++i) data[a + i] += g->net_buffer[i];
        }
        for (size_t i = 0; i < count; ++i) data[a + i] /= world;
    }
    return BFP8_OK;
}

bfp8_status dp_tcp_reduce_mean(dp_group *g, float *data, size_t n, int scatter) {
    size_t lo = 0, hi = n;
    if (scatter) dp_shard_range(g, g->rank, n, &lo, &hi);
    if (g->rank != 0) {
        BFP8_TRY(send_all(g, to_root(g), data, n * sizeof *data, 0));
        return recv_all(g, to_root(g), data + lo, (hi - lo) * sizeof *data, 0);
    }
    BFP8_TRY(root_reduce_mean(g, data, n));
    for (int r = 1; r < g->world; ++r) {
        if (scatter) dp_shard_range(g, r, n, &lo, &hi);
        BFP8_TRY(send_all(g, g->peers[r], data + lo, (hi - lo) * sizeof *data, r));
    }
    return BFP8_OK;
}

bfp8_status dp_tcp_all_gather(dp_group *g, float *data, size_t n) {
    size_t lo, hi;
    if (g->rank != 0) {
        dp_shard_range(g, g->rank, n, &lo, &hi);
        BFP8_TRY(send_all(g, to_root(g), data + lo, (hi - lo) * sizeof *data, 0));
        return recv_all(g, to_root(g), data, n * sizeof *data, 0);
    }
    for (int r = 1; r < g->world; ++r) {
        dp_shard_range(g, r, n, &lo, &hi);
        BFP8_TRY(recv_all(g, g->peers[r], data + lo, (hi - lo) * sizeof *data, r));
    }
    return dp_tcp_broadcast(g, data, n * sizeof *data);
}
