/* The fork of the dense heap's program alone (benches/c/dense.c's heap, no
   tracker): how long fork() holds the parent, three times. Usage: fork_floor N */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
struct node { struct node *a, *b; long payload[4]; };
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e3+t.tv_nsec/1e6;}
int main(int argc,char**argv){ long n=atol(argv[1]); struct node**all=malloc(n*sizeof*all);
 unsigned long x=88172645463325252ul;
 for(long i=0;i<n;i++){struct node*p=malloc(sizeof*p); x^=x<<13;x^=x>>7;x^=x<<17; p->a=i?all[x%i]:0; p->b=i?all[(x>>20)%i]:0; for(int k=0;k<4;k++)p->payload[k]=x+k; all[i]=p;}
 for(int r=0;r<3;r++){ double t0=now(); pid_t c=fork(); if(c==0)_exit(0); double t1=now(); waitpid(c,0,0); printf("fork %.2f ms\n",t1-t0);} return 0;}
